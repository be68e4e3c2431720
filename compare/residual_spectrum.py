#!/usr/bin/env python3
"""How many principal directions the residuals to 1024 k-means anchors need to hold a share
of their variance (docs/benchmarks.md, what a dimension-reducing rotation could save): FAISS
k-means (10 iterations, seed 1) on a dev set's base, each vector less its nearest anchor, the
eigenvalues of the residuals' second moments. Prints the directions for 95%, 99%, 99.5% and
99.9% of the variance, against the dimension.

  python3 compare/residual_spectrum.py $VLC_DATA/fashion-mnist-784/dev
"""
import sys

import faiss
import numpy as np

from vecs import read_vecs


def main(dev):
    x = read_vecs(f"{dev}/base.fvecs", np.float32)
    km = faiss.Kmeans(x.shape[1], 1024, niter=10, seed=1)
    km.train(x)
    _, nearest = km.index.search(x, 1)
    r = (x - km.centroids[nearest[:, 0]]).astype(np.float64)
    e = np.linalg.eigvalsh(r.T @ r / len(r))[::-1]
    share = np.cumsum(e) / e.sum()
    print(f"{dev}: d {x.shape[1]}")
    for t in (0.95, 0.99, 0.995, 0.999):
        print(f"  {t:.1%} of the residual variance: {int(np.searchsorted(share, t)) + 1} directions")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
