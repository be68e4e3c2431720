#!/usr/bin/env python3
"""Any FAISS index_factory strings on a dev set: train and add seconds, recall@10 and QPS per
nprobe, on 2 threads (L2 ground truth). For quantizers peers.py does not cover, e.g. residual
and local-search quantizers at a byte budget (`IVF1024,RQ15x8_Nqint8`: 15 B of codes and a
1-byte norm).

  python3 compare/faiss_factory.py DATASET_DIR FACTORY [FACTORY ...] [--nprobe 16,32,64]

Needs faiss-cpu and numpy (see README.md beside this file).
"""
import argparse
import os
import sys
import time

import faiss
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vecs import read_vecs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("factory", nargs="+")
    ap.add_argument("--nprobe", default="16,32,64")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    xb = read_vecs(os.path.join(a.dataset, "base.fvecs"), np.float32)
    xq = read_vecs(os.path.join(a.dataset, "query.fvecs"), np.float32)
    gt = read_vecs(os.path.join(a.dataset, "gt_l2.ivecs"), np.int32)[:, :10]
    faiss.omp_set_num_threads(a.threads)
    for spec in a.factory:
        t = time.time()
        index = faiss.index_factory(xb.shape[1], spec)
        index.train(xb)
        train = time.time() - t
        t = time.time()
        index.add(xb)
        add = time.time() - t
        ivf = faiss.extract_index_ivf(index)
        # The bytes a list keeps a vector (the list number is not among them).
        print(f"{spec}: code {ivf.code_size} B, train {train:.1f} s, add {add:.1f} s", flush=True)
        for nprobe in map(int, a.nprobe.split(",")):
            ivf.nprobe = nprobe
            t = time.time()
            _, ids = index.search(xq, 10)
            secs = time.time() - t
            r = np.mean([len(set(ids[i]) & set(gt[i])) / 10 for i in range(len(gt))])
            print(f"  nprobe {nprobe}: R@10 {r:.4f}, {len(xq) / secs:.0f} QPS", flush=True)


if __name__ == "__main__":
    main()
