#!/usr/bin/env python3
"""FAISS IndexIVFPQFastScan's add into a built index, timed as `vlcc bench --stages add`
times ours: the index holds all but the last 1% (and 7 more) of the vectors; then 7 single
adds, then the rest of the 1% in one batch, and the first 1,000-query search after it.
Needs numpy and faiss-cpu.

  python3 compare/faiss_add.py BASE.fvecs [FACTORY] [THREADS]
  # beside: vlcc bench --base BASE.fvecs --anchors 1024 --iters 8 --bits 4 --bytes 16 \\
  #         --stages add --queries 1000 --repeat 7 --threads 2 --json
"""
import sys
import time

import faiss

from vecs import read_vecs

x = read_vecs(sys.argv[1], "float32")
factory = sys.argv[2] if len(sys.argv) > 2 else "OPQ32_64,IVF1024,PQ32x4fs"
faiss.omp_set_num_threads(int(sys.argv[3]) if len(sys.argv) > 3 else 2)
n, d = x.shape
tail, reps = max(n // 100, 1), 7
n0 = n - tail - reps
ix = faiss.index_factory(d, factory)
ix.train(x[: min(n, 100_000)])
ix.add(x[:n0])
faiss.extract_index_ivf(ix).nprobe = 16
q = x[:1000]
ix.search(q, 10)
single = []
for r in range(n0, n0 + reps):
    t = time.perf_counter()
    ix.add(x[r : r + 1])
    single.append(time.perf_counter() - t)
t = time.perf_counter()
ix.add(x[n0 + reps :])
batch = time.perf_counter() - t
t = time.perf_counter()
ix.search(q, 10)
after = time.perf_counter() - t
added = n - n0 - reps
print(
    f"faiss {factory}: add of {added} in {batch * 1e3:.1f} ms = {added / batch:.0f}/s, "
    f"single add median {sorted(single)[reps // 2] * 1e3:.3f} ms, "
    f"first 1000-query search after {after * 1e3:.1f} ms"
)
