"""Ray adapter figures: encode throughput with 1 and 2 actors next to the package in one
process, and the driver's overhead per query batch of a fan-out search over shards.

    python benchmarks/ray_scale.py [--n 400000] [--d 384]

Run from a directory other than python/ (Ray's workers import from the driver's)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import pyarrow as pa
import ray

import vlc_compress as vc
import vlc_compress.ray as vr


def clustered(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((256, d), dtype=np.float32) * 2
    return centres[rng.integers(0, 256, n)] + rng.standard_normal((n, d), dtype=np.float32)


def timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def encode_table(x: np.ndarray, ds: "ray.data.Dataset", cb: vr.Codebook, args: argparse.Namespace) -> None:
    rows = {}
    for label, threads in (("one process, 1 thread", 1), ("one process, 2 threads", 2)):
        c = vc.Compressor.from_codebook(cb.data, vc.Context("cpu", threads=threads))
        rows[label] = [timed(lambda: c.encode(x)) for _ in range(args.rounds)]
    for actors in (1, 2):
        label = f"Ray, {actors} actor{'s' if actors > 1 else ''} x 1 thread"
        rows[label] = [
            timed(lambda: vr.encode(ds, cb, concurrency=actors, num_cpus=0.5, threads=1).materialize())
            for _ in range(args.rounds)
        ]
    base = statistics.median(rows["one process, 2 threads"])
    print("| encode | median s | vectors/s | vs one process, 2 threads |\n|---|---|---|---|")
    for label, ts in rows.items():
        s = statistics.median(ts)
        print(f"| {label} | {s:.2f} | {args.n / s:,.0f} | {base / s:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--d", type=int, default=384)
    ap.add_argument("--bytes", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-encode", action="store_true")
    args = ap.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    x = clustered(args.n, args.d, 1)
    table = pa.table({"id": np.arange(args.n), "vector": pa.FixedShapeTensorArray.from_numpy_ndarray(x)})
    ds = ray.data.from_arrow(table).repartition(16).materialize()
    cb = vr.train_codebook(ds, sample=50_000, params={"anchors": 1024, "bytes_per_vector": args.bytes})
    print(f"{args.n:,} x {args.d} float32, {args.bytes} B codes, 1024 anchors; 2 cores")

    if not args.skip_encode:
        encode_table(x, ds, cb, args)

    # The driver's own cost per batch (object store, scheduling, merge): one shard searched by
    # one actor next to the same shard searched in-process, both on one thread. Then four
    # shards, next to one index of everything in-process.
    q = clustered(1000, args.d, 2)
    with tempfile.TemporaryDirectory() as one_dir, tempfile.TemporaryDirectory() as four_dir:
        vr.build_shards(ds, cb, one_dir, n_shards=1)
        vr.build_shards(ds, cb, four_dir, n_shards=4)
        for label, path, threads in (("1 shard, 1 actor", one_dir, 1), ("4 shards, 4 actors", four_dir, 2)):
            whole = vr.merge_shards(path, vc.Context("cpu", threads=threads))
            print(f"\n{label} (in-process: one index of the same vectors, {threads} thread{'s' if threads > 1 else ''})")
            print("| queries per batch | fan-out, ms | in-process, ms | difference, ms |\n|---|---|---|---|")
            with vr.ShardedIndex(path, threads=1) as six:
                for nq in (1, 100, 1000):
                    qb = q[:nq]
                    six.search(qb, 10, nprobe=16)
                    whole.search(qb, 10, nprobe=16)
                    fan = statistics.median(timed(lambda: six.search(qb, 10, nprobe=16)) for _ in range(15))
                    one = statistics.median(timed(lambda: whole.search(qb, 10, nprobe=16)) for _ in range(15))
                    print(f"| {nq} | {fan * 1e3:.1f} | {one * 1e3:.1f} | {(fan - one) * 1e3:.1f} |")
    ray.shutdown()


if __name__ == "__main__":
    main()
