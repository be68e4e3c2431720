#!/usr/bin/env python3
"""How many anchors the 8-bit coarse bounds leave to score in f32 (docs/search.md, "Probing
from 8-bit products"): 1024 k-means anchors (FAISS, 10 iterations, seed 1) of a dev set's
base, the dev queries, each anchor and query rounded to integers of at most 127 on its own
scale, and the bound |<q,a> - <q~,a~>| <= |q - q~| |a| + |q~| |a - a~| on each L2 score. An
anchor is left to score where its lower bound is not above the nprobe-th least upper bound.
Prints the mean and 99th percentile per nprobe (bf16 rounding for comparison).

  python3 compare/coarse8_candidates.py $VLC_DATA/wordnet-minilm-384/dev
"""
import sys

import faiss
import numpy as np

from vecs import read_vecs


def bf16(v):
    u = v.view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)


def int8(v):
    s = np.abs(v).max(1, keepdims=True) / 127
    return np.round(v / s) * s


def main(dev):
    x = read_vecs(f"{dev}/base.fvecs", np.float32)
    q = read_vecs(f"{dev}/query.fvecs", np.float32)
    km = faiss.Kmeans(x.shape[1], 1024, niter=10, seed=1)
    km.train(x)
    a = km.centroids
    an, qn = (a * a).sum(1), (q * q).sum(1)
    for name, f in [("int8", int8), ("bf16", bf16)]:
        ar, qr = f(a), f(q)
        ea = np.sqrt(((a - ar) ** 2).sum(1))
        eq = np.sqrt(((q - qr) ** 2).sum(1))
        approx = qn[:, None] + an[None, :] - 2 * qr @ ar.T
        err = 2 * (eq[:, None] * np.sqrt(an)[None, :] + np.sqrt((qr * qr).sum(1))[:, None] * ea[None, :])
        err = err * 1.001 + 1e-6
        for nprobe in [2, 4, 16]:
            ub = np.sort(approx + err, 1)[:, nprobe - 1]
            left = ((approx - err) <= ub[:, None]).sum(1)
            print(f"{name} nprobe {nprobe}: {left.mean():.1f} anchors a query, p99 {np.percentile(left, 99):.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
