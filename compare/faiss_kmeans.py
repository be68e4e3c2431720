#!/usr/bin/env python3
"""faiss.Kmeans on the same workloads as `vlcc bench --stages train`, for side-by-side numbers:
training time, energy (mean squared distance of every vector to its nearest centroid) and
balance (largest list / mean list). Needs numpy and faiss-cpu.

  python3 compare/faiss_kmeans.py BASE.fvecs K ITERS [SEED]    # a dataset, every vector
  python3 compare/faiss_kmeans.py --gaussian 10000x128 K ITERS  # the seed workload (best of 7)
"""
import sys
import time

import faiss
import numpy as np


def read_fvecs(path):
    raw = np.fromfile(path, dtype="<i4")
    d = int(raw[0])
    return raw.reshape(-1, d + 1)[:, 1:].copy().view("<f4")


def main():
    args = sys.argv[1:]
    gaussian = args[0] == "--gaussian"
    if gaussian:
        n, d = (int(v) for v in args[1].split("x"))
        x = np.random.default_rng(1).standard_normal((n, d)).astype("float32")
        k, iters = int(args[2]), int(args[3])
    else:
        x = read_fvecs(args[0])
        k, iters = int(args[1]), int(args[2])
    seed = int(args[4 if gaussian else 3]) if len(args) > (4 if gaussian else 3) else 1234
    faiss.omp_set_num_threads(2)
    best, km = float("inf"), None
    for _ in range(7 if gaussian else 1):
        km = faiss.Kmeans(x.shape[1], k, niter=iters, seed=seed, max_points_per_centroid=x.shape[0] // k + 1)
        t = time.perf_counter()
        km.train(x)
        best = min(best, time.perf_counter() - t)
    dist, assign = km.index.search(x, 1)
    counts = np.bincount(assign[:, 0], minlength=k)
    print(f"faiss n={len(x)} d={x.shape[1]} k={k} iters={iters} train_s={best:.4f} "
          f"energy={dist.mean():.6g} max_over_mean={counts.max() / counts.mean():.3f}")


if __name__ == "__main__":
    main()
