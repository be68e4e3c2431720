"""`python -m vlc_compress demo`: train, index and search synthetic clustered vectors, and
print recall against exact search and the search rate."""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import vlc_compress as vc


def clustered(n: int, d: int, clusters: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.standard_normal((clusters, d), dtype=np.float32) * 4
    return (centres[rng.integers(0, clusters, n)] + rng.standard_normal((n, d), dtype=np.float32)).astype(np.float32)


def demo(args: argparse.Namespace) -> int:
    rng = np.random.default_rng(args.seed)
    x = clustered(args.n, args.d, 64, rng)
    q = x[rng.choice(args.n, args.queries, replace=False)] + rng.standard_normal((args.queries, args.d), dtype=np.float32) * 0.1
    c = vc.Compressor(anchors=args.anchors, bytes_per_vector=args.bytes)
    t = time.perf_counter()
    c.train(x)
    train_s = time.perf_counter() - t
    index = c.new_index()
    index.add(x)
    t = time.perf_counter()
    D, I = index.search(q, 10, nprobe=args.nprobe)
    search_s = time.perf_counter() - t
    # Exact neighbours by brute force.
    d2 = (q**2).sum(1)[:, None] - 2 * q @ x.T + (x**2).sum(1)[None, :]
    gt = np.argsort(d2, axis=1)[:, :10]
    recall = np.mean([len(set(I[i]) & set(gt[i])) / 10 for i in range(len(q))])
    print(f"vlc_compress {vc.__version__}: {args.n} x {args.d} vectors, {args.bytes} B codes")
    print(f"  train {train_s:.2f} s, search {len(q) / search_s:,.0f} queries/s, recall@10 {recall:.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m vlc_compress")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="train, index and search synthetic vectors")
    d.add_argument("--n", type=int, default=20000)
    d.add_argument("--d", type=int, default=64)
    d.add_argument("--queries", type=int, default=200)
    d.add_argument("--anchors", type=int, default=128)
    d.add_argument("--bytes", type=int, default=16)
    d.add_argument("--nprobe", type=int, default=16)
    d.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
