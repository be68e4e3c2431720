"""Python search next to C on the same index file and queries, alternating, and the search
rate of one and two Python threads (single-query calls, the shape of a service).

    python benchmarks/search_vs_c.py [--reps 15]

Builds benchmarks/search_c.c against ../target/release (run `cargo build --release` first);
reads the demo GloVe set in ../tests/data/glove-demo."""

from __future__ import annotations

import argparse
import pathlib
import statistics
import subprocess
import tempfile
import threading
import time

import numpy as np

import vlc_compress as vc

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def fvecs(path: pathlib.Path) -> np.ndarray:
    raw = np.fromfile(path, dtype=np.int32)
    d = raw[0]
    return raw.reshape(-1, d + 1)[:, 1:].copy().view(np.float32)


def python_qps(index: vc.Index, q: np.ndarray, k: int, nprobe: int) -> float:
    t = time.perf_counter()
    index.search(q, k, nprobe=nprobe)
    return len(q) / (time.perf_counter() - t)


def threaded_qps(index: vc.Index, q: np.ndarray, threads: int, seconds: float) -> float:
    counts = [0] * threads
    stop = threading.Event()

    def run(t: int) -> None:
        i = t
        while not stop.is_set():
            index.search(q[i % len(q) : i % len(q) + 1], 10, nprobe=16)
            counts[t] += 1
            i += threads

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join()
    return sum(counts) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--nprobe", type=int, default=16)
    args = ap.parse_args()
    data = ROOT / "tests" / "data" / "glove-demo"
    x, q = fvecs(data / "base.fvecs"), fvecs(data / "query.fvecs")
    q = np.tile(q, (1000 // len(q) + 1, 1))[:1000].copy()
    c = vc.Compressor(anchors=256, bytes_per_vector=16)
    c.train(x)
    index = c.new_index()
    index.add(x)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        index.save(tmp / "ix.vlcc")
        q.tofile(tmp / "q.f32")
        exe = tmp / "search_c"
        lib = ROOT / "target" / "release"
        subprocess.run(
            ["cc", "-O2", str(HERE / "search_c.c"), f"-I{ROOT / 'include'}", f"-L{lib}",
             f"-Wl,-rpath,{lib}", "-lvlc_compress", "-o", str(exe)],
            check=True,
        )
        index = vc.Index.load(tmp / "ix.vlcc", mmap=False)
        index.search(q, 10, nprobe=args.nprobe)
        py, cc = [], []
        for _ in range(5):
            py.append(statistics.median(python_qps(index, q, 10, args.nprobe) for _ in range(args.reps)))
            out = subprocess.run(
                [str(exe), str(tmp / "ix.vlcc"), str(tmp / "q.f32"), str(x.shape[1]), "10",
                 str(args.nprobe), str(args.reps)],
                check=True, capture_output=True, text=True,
            ).stdout
            cc.append(float(out))
    print(f"1,000-query batches, k 10, nprobe {args.nprobe}, 16 B codes, {len(x)} x {x.shape[1]} GloVe")
    print("  rounds (Python, C):", ", ".join(f"{p:,.0f}/{c:,.0f}" for p, c in zip(py, cc)))
    print(f"  median QPS: Python {statistics.median(py):,.0f}, C {statistics.median(cc):,.0f}, "
          f"ratio {statistics.median(py) / statistics.median(cc):.3f}")
    one = [threaded_qps(index, q, 1, 1.0) for _ in range(3)]
    two = [threaded_qps(index, q, 2, 1.0) for _ in range(3)]
    print(f"single-query calls: 1 thread {statistics.median(one):,.0f} QPS, 2 threads "
          f"{statistics.median(two):,.0f} QPS, ratio {statistics.median(two) / statistics.median(one):.2f}")


if __name__ == "__main__":
    main()
