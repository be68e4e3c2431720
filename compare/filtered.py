#!/usr/bin/env python3
"""Filtered search on the development datasets: recall@10 and QPS at 1%, 10% and 50% of the
ids allowed, against unfiltered search on the same index.

For each dev set this trains and builds one index with `vlcc` (default parameters, the set's
byte budget), then for each selectivity writes a seeded random id list, computes the exact
top-10 among the allowed vectors by brute force (numpy), and runs `vlcc search --filter` at
nprobe 16 and 64 (2 threads). Prints one markdown table per set, with the commands.

  python3 compare/filtered.py [--root ~/.cache/vlc-datasets] [--out DIR] [--sets a,b]
                              [--vlcc target/release/vlcc]

Needs numpy and a release build of `vlcc`.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

SETS = {"glove-6b-50": 16, "wordnet-minilm-384": 32, "fashion-mnist-784": 64}
PCTS = [None, 50, 10, 1]
NPROBES = [16, 64]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fvecs(path):
    a = np.fromfile(path, dtype=np.int32)
    d = a[0]
    return a.reshape(-1, d + 1)[:, 1:].view(np.float32)


def exact_top10(base, query, allowed):
    """The 10 nearest allowed ids (squared L2) of each query, by brute force in blocks."""
    sub = base[allowed]
    sn = (sub * sub).sum(1)
    out = []
    for i in range(0, len(query), 256):
        q = query[i:i + 256]
        d = sn[None, :] - 2 * q @ sub.T
        k = min(10, len(allowed))
        part = np.argpartition(d, k - 1, axis=1)[:, :k]
        order = np.take_along_axis(d, part, 1).argsort(1)
        out.append(allowed[np.take_along_axis(part, order, 1)])
    return np.concatenate(out)


def recall10(got, truth):
    hits = sum(len(set(g[:10]) & set(t[:10])) for g, t in zip(got, truth))
    return hits / (10 * len(truth))


def run(cmd, root):
    log("$", " ".join(cmd).replace(root, "$VLC_DATA"))
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.environ.get("VLC_DATA", os.path.expanduser("~/.cache/vlc-datasets")))
    ap.add_argument("--out", default="/tmp/vlcc-filtered")
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--vlcc", default="target/release/vlcc")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(7)
    for name in a.sets.split(","):
        dev = f"{a.root}/{name}/dev"
        base, query = fvecs(f"{dev}/base.fvecs"), fvecs(f"{dev}/query.fvecs")
        gt = fvecs(f"{dev}/gt_l2.ivecs").view(np.int32)
        cb, ix = f"{a.out}/{name}.cb.vlcc", f"{a.out}/{name}.ix.vlcc"
        run([a.vlcc, "train", "--input", f"{dev}/base.fvecs", "--bytes", str(SETS[name]),
             "--out", cb, "--threads", "2"], a.root)
        run([a.vlcc, "build", "--input", f"{dev}/base.fvecs", "--codebook", cb, "--out", ix,
             "--threads", "2"], a.root)
        rows = []
        for pct in PCTS:
            extra = []
            if pct is None:
                truth = gt
            else:
                allowed = np.sort(rng.choice(len(base), len(base) * pct // 100, replace=False))
                ids = f"{a.out}/{name}.allow{pct}.txt"
                np.savetxt(ids, allowed, fmt="%d")
                truth = exact_top10(base, query, allowed)
                extra = ["--filter", ids]
            for nprobe in NPROBES:
                res = f"{a.out}/{name}.r.npy"
                cmd = [a.vlcc, "search", "--index", ix, "--query", f"{dev}/query.fvecs", "--k",
                       "10", "--nprobe", str(nprobe), "--threads", "2", "--out", res, "--json"]
                # The best of three runs: one run of 1000 queries takes a tenth of a second.
                runs = [json.loads(run(cmd + extra, a.root)) for _ in range(3)]
                got = np.load(res)
                rows.append((f"{pct}%" if pct else "none", nprobe, recall10(got, truth),
                             max(j["qps"] for j in runs), runs[0]["queries_short_of_k"]))
        print(f"### {name} ({SETS[name]} B, default parameters)\n")
        print("| allowed | nprobe | R@10 (exact among allowed) | QPS (2T, best of 3) | queries short of 10 |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:,.0f} | {r[4]} |")
        print(f"\nCommands: `vlcc train --input $VLC_DATA/{name}/dev/base.fvecs --bytes {SETS[name]}`, "
              f"`vlcc build`, then `vlcc search --nprobe 16|64 --filter allowPCT.txt` "
              f"(ids drawn with numpy seed 7).\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
