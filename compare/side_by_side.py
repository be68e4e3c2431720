#!/usr/bin/env python3
"""FAISS and vlc_compress side by side on the development datasets, one table per set.

For each dev set this runs, back to back on one machine:
  - peers.py for FAISS IVF-PQ, OPQ+IVF-PQ, IVF-PQ 4-bit fast-scan and IVF-RaBitQ (1024 lists,
    2 threads, the set's byte budget; dimensions padded with zero columns where PQ needs M | d);
  - `vlcc eval` with the library's default parameters (only --bytes, as a new user runs it),
    and the same with --bits 4 (the fast-scan layout);
then prints one markdown table per set and the issue's targets as ratios:
  - recall: our best recall@10 over nprobe <= 64 against FAISS OPQ's + 0.03;
  - training: our training seconds against FAISS IVF-PQ's (coarse k-means included);
  - speed: our QPS, interpolated over our nprobe curve at the recall FAISS reaches at nprobe 16,
    against FAISS's QPS there (4-bit against IVF-PQ fast-scan, 8-bit against IVF-PQ);
  - encoding: vectors per second of adding the base, 2 threads.

  python3 compare/side_by_side.py [--root ~/.cache/vlc-datasets] [--out DIR] [--sets a,b]
                                  [--vlcc target/release/vlcc]

Needs faiss-cpu and numpy (see README.md beside this file) and a release build of `vlcc`.
"""
import argparse
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# name, metric, ground truth, bytes, pad-to (FAISS needs M | d), our metric
SETS = {
    "glove-6b-50": ("l2", "gt_l2", 16, 32, "l2"),
    "wordnet-minilm-384": ("l2", "gt_l2", 32, 0, "l2"),
    "wordnet-minilm-384-ip": ("ip", "gt_ip", 32, 0, "ip"),
    "fashion-mnist-784": ("l2", "gt_l2", 64, 128, "l2"),
}
FAMILIES = "ivfpq,opq,ivfpqfs,ivfrabitq"
NPROBE_FAISS = "1,4,16,64"
NPROBE_OURS = "1,2,4,8,12,16,24,32,48,64"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run_faiss(name, dev, metric, budget, pad, out):
    prefix = os.path.join(out, f"{name}-faiss")
    cmd = [sys.executable, os.path.join(HERE, "peers.py"), dev, "--metric", metric,
           "--families", FAMILIES, "--budgets", str(budget), "--nlist", "1024",
           "--nprobe", NPROBE_FAISS, "--threads", "2", "--skip-kmeans", "--no-refine",
           "--no-r100", "--recon-n", "0", "--out", prefix]
    if pad:
        cmd += ["--pad-to", str(pad)]
    log("$", " ".join(cmd))
    with open(prefix + ".log", "w") as f:
        subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT)
    with open(prefix + ".json") as f:
        return json.load(f)


def run_ours(vlcc, dev, gt, metric, budget, extra, root):
    cmd = [vlcc, "eval", "--base", f"{dev}/base.fvecs", "--query", f"{dev}/query.fvecs",
           "--gt", f"{dev}/{gt}.ivecs", "--bytes", str(budget), "--threads", "2",
           "--nprobe", NPROBE_OURS, "--json"] + (["--metric", metric] if metric != "l2" else [])
    cmd += extra
    log("$", " ".join(cmd))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    # The command as a reader reruns it: the datasets' root as $VLC_DATA.
    return {"cmd": " ".join(cmd[1:]).replace(root, "$VLC_DATA"), "rows": rows}


def interp_qps(curve, target):
    """QPS at recall `target` along (recall, qps) points sorted by nprobe, log-linear in QPS;
    None when the curve never reaches it."""
    best = None
    for (r0, q0), (r1, q1) in zip(curve, curve[1:]):
        if r0 >= target:
            best = max(best or 0, q0)
        elif r1 >= target:
            t = (target - r0) / (r1 - r0)
            best = max(best or 0, math.exp(math.log(q0) + t * (math.log(q1) - math.log(q0))))
    if curve and curve[-1][0] >= target:
        best = max(best or 0, curve[-1][1])
    return best


def fmt(v, nd=3):
    if v is None:
        return "-"
    if isinstance(v, float) and v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def table(name, faiss_res, ours):
    n = faiss_res["meta"]["n"]
    rows, ref = [], {}
    for r in faiss_res["faiss"]:
        s = {x["nprobe"]: x for x in r["searches"]}
        best = max(x["r10_at_10"] for x in r["searches"])
        ref[r["family"]] = {"train": r["train_s"], "p16": s.get(16), "best": best}
        rows.append([f"FAISS `{r['factory']}`", r["code_bytes"], fmt(r["train_s"], 1),
                     fmt(r["add_vps"]), *[fmt(s[p]["r10_at_10"]) if p in s else "-" for p in (1, 4, 16, 64)],
                     fmt(best), fmt(s[16]["qps_2t"]) if 16 in s else "-"])
    for label, o in ours.items():
        s = {x["nprobe"]: x for x in o["rows"]}
        r0 = o["rows"][0]
        o["best"] = max(x["recall_at_10"] for x in o["rows"] if x["nprobe"] <= 64)
        o["curve"] = [(x["recall_at_10"], x["qps"]) for x in o["rows"]]
        rows.append([f"vlc {label}", r0["bytes_per_vector"], fmt(r0["train_seconds"], 1),
                     fmt(n / r0["encode_seconds"]),
                     *[fmt(s[p]["recall_at_10"]) if p in s else "-" for p in (1, 4, 16, 64)],
                     fmt(o["best"]), fmt(s[16]["qps"]) if 16 in s else "-"])
    head = ["index", "code B", "train s", "add vec/s (2T)", "R@10 p1", "p4", "p16", "p64",
            "best R@10 (p<=64)", "QPS p16 (2T)"]
    lines = [f"### {name}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    lines += ["", "Targets:"]
    d = ours["default"]
    if "opq" in ref:
        want = ref["opq"]["best"] + 0.03
        lines.append(f"- recall: ours {d['best']:.3f} vs OPQ {ref['opq']['best']:.3f} + 0.03 = {want:.3f}: "
                     + ("met" if d["best"] >= want else f"not met (short by {want - d['best']:.3f})"))
    if "ivfpq" in ref:
        t = d["rows"][0]["train_seconds"]
        lines.append(f"- training: ours {t:.1f} s vs FAISS IVF-PQ {ref['ivfpq']['train']:.1f} s: "
                     f"{t / ref['ivfpq']['train']:.2f}x its time")
    for fam, label, what in (("ivfpqfs", "4-bit", "IVF-PQ fast-scan"), ("ivfpq", "default", "IVF-PQ")):
        if fam not in ref or label not in ours or ref[fam]["p16"] is None:
            continue
        rec, qps = ref[fam]["p16"]["r10_at_10"], ref[fam]["p16"]["qps_2t"]
        q = interp_qps(ours[label]["curve"], rec)
        lines.append(f"- speed, ours {label} vs {what} at its nprobe-16 recall {rec:.3f} ({qps:,.0f} QPS): "
                     + (f"{q:,.0f} QPS, {q / qps:.2f}x" if q else "our curve does not reach it"))
    lines += ["", "Our commands: " + "; ".join(f"`vlcc {o['cmd']}`" for o in ours.values()), ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.expanduser(os.environ.get("VLC_DATA", "~/.cache/vlc-datasets")))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "side-by-side"))
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--vlcc", default=os.path.join(HERE, "..", "target", "release", "vlcc"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    parts = []
    for name in args.sets.split(","):
        metric, gt, budget, pad, ours_metric = SETS[name]
        dev = os.path.join(args.root, name.removesuffix("-ip"), "dev")
        faiss_res = run_faiss(name, dev, metric, budget, pad, args.out)
        ours = {"default": run_ours(args.vlcc, dev, gt, ours_metric, budget, [], args.root),
                "4-bit": run_ours(args.vlcc, dev, gt, ours_metric, budget, ["--bits", "4"], args.root)}
        with open(os.path.join(args.out, f"{name}-vlc.json"), "w") as f:
            json.dump(ours, f, indent=1)
        parts.append(table(f"{name} ({metric}, {budget} B)", faiss_res, ours))
        print(parts[-1], flush=True)
    with open(os.path.join(args.out, "side-by-side.md"), "w") as f:
        f.write("\n".join(parts))


if __name__ == "__main__":
    main()
