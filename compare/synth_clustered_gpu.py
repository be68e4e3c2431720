"""The 1M x 384 search set of notes/perf-cuda.md: Gaussian clusters around 1024 centres whose
points vary in an 8-d subspace per group of 16 clusters, plus small isotropic noise; 10k queries
from the same distribution; exact L2 top-10 by brute force on the GPU (PyTorch, fp32).
Usage: python3 compare/synth_clustered_gpu.py OUT_DIR  (writes base.npy, query.npy, gt.ivecs)"""
import os, sys, numpy as np, torch
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
g = torch.Generator(device="cuda").manual_seed(7)
n, d, nq, c, r = 1_000_000, 384, 10_000, 1024, 8
centers = torch.randn(c, d, device="cuda", generator=g)
basis = torch.randn(c // 16, d, r, device="cuda", generator=g) * 0.3  # 16 clusters share a subspace
def draw(m):
    lab = torch.randint(0, c, (m,), device="cuda", generator=g)
    z = torch.randn(m, r, 1, device="cuda", generator=g)
    x = centers[lab] + torch.bmm(basis[lab // 16], z).squeeze(-1) + 0.05 * torch.randn(m, d, device="cuda", generator=g)
    return x.float()
base, query = draw(n), draw(nq)
bn = (base * base).sum(1)
gt = []
for s in range(0, nq, 1000):
    dist = bn[None, :] - 2.0 * query[s:s + 1000] @ base.T
    gt.append(dist.topk(10, dim=1, largest=False).indices.int().cpu())
gt = torch.cat(gt).numpy()
np.save(f"{out}/base.npy", base.cpu().numpy()); np.save(f"{out}/query.npy", query.cpu().numpy())
with open(f"{out}/gt.ivecs", "wb") as f:
    np.concatenate([np.full((nq, 1), 10, np.int32), gt], 1).astype(np.int32).tofile(f)
print("wrote", base.shape, query.shape, gt.shape)
