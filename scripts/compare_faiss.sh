#!/usr/bin/env bash
# Side-by-side recall/speed against FAISS on the dev datasets, one dataset at a time, FAISS and
# `vlcc eval` back to back so both see the same machine state.
#
#   PEERS=compare/peers.py PYTHON=python3 scripts/compare_faiss.sh OUT_DIR [DATASETS_ROOT]
#
# PYTHON must have faiss-cpu and numpy; DATASETS_ROOT defaults to ~/.cache/vlc-datasets.
# Writes OUT_DIR/<dataset>-faiss.{json,md} and OUT_DIR/<dataset>-vlc.jsonl.
set -euo pipefail
out=${1:?usage: compare_faiss.sh OUT_DIR [DATASETS_ROOT]}
root=${2:-$HOME/.cache/vlc-datasets}
peers=${PEERS:?set PEERS to the peers.py benchmark script}
py=${PYTHON:-python3}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --bin vlcc -q
vlc=target/release/vlcc
mkdir -p "$out"

# dataset, FAISS budget, our byte budgets (the first equals FAISS's code size)
run() {
  local ds=$1 budget=$2; shift 2
  local dir=$root/$ds/dev
  "$py" "$peers" "$dir" --families ivfpq --budgets "$budget" --nlist 1024 --nprobe 1,4,16,64 \
    --skip-kmeans --threads 2 --out "$out/$ds-faiss" > "$out/$ds-faiss.log" 2>&1
  : > "$out/$ds-vlc.jsonl"
  local first=$1
  for b in "$@"; do
    # The learned rotation only at FAISS's code size: it is the costly variant.
    rots=(none)
    [ "$b" = "$first" ] && rots+=(learned)
    for rot in "${rots[@]}"; do
      "$vlc" eval --base "$dir/base.fvecs" --query "$dir/query.fvecs" --gt "$dir/gt_l2.ivecs" --metric l2 \
        --bytes "$b" --anchors 1024 --iters 10 --rotation "$rot" --nprobe 1,4,16,64 --threads 2 --json \
        | sed "s/^{/{\"rotation\":\"$rot\",/" >> "$out/$ds-vlc.jsonl"
    done
    "$vlc" eval --base "$dir/base.fvecs" --query "$dir/query.fvecs" --gt "$dir/gt_l2.ivecs" --metric l2 \
      --bytes "$b" --anchors 1024 --iters 10 --nprobe 16,64 --rerank 100 --threads 2 --json \
      | sed 's/^{/{"rotation":"none",/' >> "$out/$ds-vlc.jsonl"
  done
}

run glove-6b-50 16 10 16
run wordnet-minilm-384 32 32
run fashion-mnist-784 64 56 64
echo "results in $out"
