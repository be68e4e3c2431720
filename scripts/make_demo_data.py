#!/usr/bin/env python3
"""Cut the small dataset that `vlcc demo` and the tests use out of the glove-6b-50 dev set.

Usage: python3 scripts/make_demo_data.py GLOVE_DIR [OUT_DIR]
GLOVE_DIR holds dev/base.fvecs and dev/query.fvecs (built by the datasets scripts);
OUT_DIR defaults to tests/data/glove-demo. Keeps the first 20,000 base vectors and the first
500 queries and recomputes exact L2 ground truth (float64, ties to the smaller id), 100 per query.
"""
import os
import sys

import numpy as np


def read_fvecs(path):
    raw = np.fromfile(path, dtype="<i4")
    d = int(raw[0])
    return raw.reshape(-1, d + 1)[:, 1:].copy().view("<f4")


def write_vecs(path, x, dtype):
    x = np.ascontiguousarray(x, dtype=dtype)
    n, d = x.shape
    out = np.empty((n, d + 1), dtype=dtype)
    out[:, 1:] = x
    out.view("<i4")[:, 0] = d
    out.tofile(path)


def main():
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "..", "tests", "data", "glove-demo")
    base = read_fvecs(os.path.join(src, "dev", "base.fvecs"))[:20000]
    query = read_fvecs(os.path.join(src, "dev", "query.fvecs"))[:500]
    b = base.astype(np.float64)
    q = query.astype(np.float64)
    dist = (b * b).sum(1)[None, :] - 2.0 * q @ b.T + (q * q).sum(1)[:, None]
    gt = np.empty((len(q), 100), dtype=np.int32)
    for i, row in enumerate(dist):
        order = np.lexsort((np.arange(len(row)), row))
        gt[i] = order[:100]
    os.makedirs(out, exist_ok=True)
    write_vecs(os.path.join(out, "base.fvecs"), base, "<f4")
    write_vecs(os.path.join(out, "query.fvecs"), query, "<f4")
    write_vecs(os.path.join(out, "gt_l2.ivecs"), gt, "<i4")
    print("wrote", base.shape, query.shape, gt.shape, "to", out)


if __name__ == "__main__":
    main()
