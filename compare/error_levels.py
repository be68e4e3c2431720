#!/usr/bin/env python3
"""What an error level is worth at equal bytes, exhaustively (docs/training.md's first table).

For one dev set and byte budget B: trains plain codebooks (`--error-code off`) of B and B - 1
bytes with `vlcc train`, encodes and decodes the base with them, then ranks every base vector
for each query (recall@10 against the L2 ground truth) by
  - the reconstruction's distance, B bytes;
  - the reconstruction's distance plus the vector's exact squared error, B - 1 bytes (the byte
    left over is what the level costs);
without an index, so that the codes alone are compared.

  python3 compare/error_levels.py DATASET_DIR BYTES [--vlcc target/release/vlcc] [--out DIR]

Needs numpy.
"""
import argparse
import os
import subprocess
import tempfile

import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vecs import read_vecs  # noqa: E402


def recall(scores, gt):
    top = np.argsort(scores, axis=1)[:, :10]
    return np.mean([len(set(top[i]) & set(gt[i, :10])) / 10 for i in range(len(gt))])


def reconstruct(vlcc, base, nbytes, out):
    cb, codes, dec = (os.path.join(out, f"{nbytes}.{e}") for e in ("vlcc", "npy", "dec.npy"))
    run = lambda *a: subprocess.run([vlcc, *a], check=True, stdout=subprocess.DEVNULL)
    run("train", "--input", base, "--bytes", str(nbytes), "--error-code", "off", "--threads", "2", "--out", cb)
    run("encode", "--codebook", cb, "--input", base, "--out", codes, "--threads", "2")
    run("decode", "--codebook", cb, "--input", codes, "--out", dec)
    return np.load(dec).astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("bytes", type=int)
    ap.add_argument("--vlcc", default="target/release/vlcc")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp()
    base = os.path.join(a.dataset, "base.fvecs")
    x = read_vecs(base, np.float32).astype(np.float64)
    q = read_vecs(os.path.join(a.dataset, "query.fvecs"), np.float32).astype(np.float64)
    gt = read_vecs(os.path.join(a.dataset, "gt_l2.ivecs"), np.int32)
    rows = {}
    for nbytes in (a.bytes, a.bytes - 1):
        xh = reconstruct(a.vlcc, base, nbytes, out)
        scores = (xh * xh).sum(1) - 2 * q @ xh.T
        err = ((x - xh) ** 2).sum(1)
        rows[nbytes] = (recall(scores, gt), recall(scores + err, gt))
    print(f"{a.dataset} {a.bytes} B ({x.shape[1] / a.bytes:.2f} dimensions a byte)")
    print(f"  all sub-quantizers, reconstruction:          {rows[a.bytes][0]:.4f}")
    print(f"  one byte less, reconstruction:               {rows[a.bytes - 1][0]:.4f}")
    print(f"  one byte less, plus the exact squared error: {rows[a.bytes - 1][1]:.4f}")


if __name__ == "__main__":
    main()
