"""The Python package on CUDA, where a GPU is: `python benchmarks/cuda_check.py`. What
vlc_compress.ray.train_codebook(num_gpus=1) runs in its GPU worker (a Compressor on a CUDA
context, trained, its bytes), checked against the CPU."""
import time

import numpy as np
import vlc_compress as vc

rng = np.random.default_rng(0)
centres = rng.standard_normal((256, 128), dtype=np.float32) * 3
x = centres[rng.integers(0, 256, 200_000)] + rng.standard_normal((200_000, 128), dtype=np.float32)
params = dict(anchors=1024, bytes_per_vector=32, seed=3)
out = {}
for backend in ("cpu", "cuda"):
    ctx = vc.Context(backend)
    c = vc.Compressor(ctx, **params)
    t = time.perf_counter(); c.train(x); s = time.perf_counter() - t
    back = vc.Compressor.from_codebook(c.codebook_bytes())  # as the driver gets it
    y = back.decode(back.encode(x[:20000]))
    mse = float(((y - x[:20000]) ** 2).sum(1).mean())
    ix = back.new_index(); ix.add(x)
    D, I = ix.search(x[:500], 10, nprobe=16)
    out[backend] = (ctx.backend, s, mse, float((I[:, 0] == np.arange(500)).mean()))
    print(backend, "context backend", ctx.backend, f"train {s:.2f} s, decode mse {mse:.4f}, self-hit {out[backend][3]:.3f}")
print("mse cuda/cpu", out["cuda"][2] / out["cpu"][2])
assert out["cuda"][0] == "cuda"
assert out["cuda"][2] < 1.05 * out["cpu"][2]
print("python cuda: ok")
