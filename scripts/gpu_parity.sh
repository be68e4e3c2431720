#!/usr/bin/env bash
# CPU, CUDA and WGPU side by side on the dev datasets, seeds 1-3, on a GPU machine: energy,
# balance, recall@10 at nprobe 16 and 64, train seconds, one line per run, then the means.
#
#   VLC=target/release/vlcc [SETS="glove-6b-50 ..."] scripts/gpu_parity.sh [DATASETS_ROOT]
#
# The base vectors go in as float16 .npy (exact for Fashion-MNIST's integer pixels; a dev/
# base.npy already there is used as it is), the queries and ground truth as they are
# (float32). PYTHON (default python3) needs numpy. SETS picks some of the three sets.
set -euo pipefail
root=${1:-$HOME/.cache/vlc-datasets}
vlc=${VLC:-target/release/vlcc}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
sets=${SETS:-glove-6b-50 wordnet-minilm-384 fashion-mnist-784}
for ds_b in glove-6b-50:16 wordnet-minilm-384:32 fashion-mnist-784:64; do
  ds=${ds_b%%:*}; b=${ds_b#*:}; dir=$root/$ds/dev
  [[ " $sets " == *" $ds "* ]] || continue
  if [[ -f $dir/base.npy ]]; then
    ln -s "$(cd "$dir" && pwd)/base.npy" "$tmp/$ds.npy"
  else
    PYTHONPATH="$here" "$py" - "$dir/base.fvecs" "$tmp/$ds.npy" <<'PY'
import sys, numpy as np
from make_demo_data import read_fvecs
np.save(sys.argv[2], read_fvecs(sys.argv[1]).astype(np.float16))
PY
  fi
  for seed in 1 2 3; do for be in cpu cuda wgpu; do
    "$vlc" eval --backend "$be" --base "$tmp/$ds.npy" --query "$dir/query.fvecs" \
      --gt "$dir/gt_l2.ivecs" --metric l2 --bytes "$b" --anchors 1024 --nprobe 16,64 \
      --seed "$seed" --json > "$tmp/$ds-$be-$seed.jsonl"
  done; done
done
"$py" - "$tmp" <<'PY'
import glob, json, os, sys
from collections import defaultdict
runs = defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    ds, be, seed = os.path.basename(f)[:-6].rsplit("-", 2)
    rs = [json.loads(l) for l in open(f)]
    row = [rs[0]["energy"], rs[0]["max_list_over_mean"], rs[0]["recall_at_10"],
           rs[1]["recall_at_10"], rs[0]["train_seconds"]]
    print(ds, "seed", seed, be, " ".join(f"{v:.6g}" for v in row))
    runs[ds, be].append(row)
print("\nmeans over seeds: energy (vs cpu), recall@10 nprobe 16 / 64 (points vs cpu)")
for ds in sorted({k[0] for k in runs}):
    m = {be: [sum(c) / len(c) for c in zip(*runs[ds, be])] for be in ("cpu", "cuda", "wgpu")}
    for be in ("cuda", "wgpu"):
        print(f"{ds} {be}: energy {m[be][0]:.6g} ({(m[be][0] / m['cpu'][0] - 1) * 100:+.3f}%), "
              f"recall {m[be][2]:.4f} ({(m[be][2] - m['cpu'][2]) * 100:+.2f}) / "
              f"{m[be][3]:.4f} ({(m[be][3] - m['cpu'][3]) * 100:+.2f})")
PY
