#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) for SECONDS each, default 60, starting from the
# seeds kept in fuzz/corpus/<target>; what the run finds goes to a scratch directory. With
# --merge, the inputs that reached new code are merged back into fuzz/corpus (after a long run,
# outside CI). A crash stops the script with its input in fuzz/artifacts/<target>/.
# Needs the nightly toolchain (libFuzzer's instrumentation) and cargo-fuzz, which it installs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"
seconds=60
merge=0
for a in "$@"; do
  case $a in
    --merge) merge=1 ;;
    *) seconds=$a ;;
  esac
done
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo fuzz --version >/dev/null 2>&1 || cargo install --locked cargo-fuzz --version 0.13.2
# Huge claimed sizes must fail as a host's malloc does (NULL, then OUT_OF_MEMORY), not abort.
export ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"; rm -f "${TMPDIR:-/tmp}"/vlcc-fuzz-*' EXIT
cargo +nightly fuzz build -O
for t in $(cargo +nightly fuzz list); do
  mkdir -p "$scratch/$t" "corpus/$t"
  echo "== fuzz $t for ${seconds}s"
  log=$scratch/$t.log
  if ! cargo +nightly fuzz run -O "$t" "$scratch/$t" "corpus/$t" -- \
      -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz target $t failed: its input is in fuzz/artifacts/$t"
    exit 1
  fi
  grep -E '^(Done|stat::number_of_executed_units|stat::new_units_added)|cov: [0-9]+ .*DONE' "$log" || true
  if [ "$merge" = 1 ]; then
    cargo +nightly fuzz run -O "$t" "corpus/$t" "$scratch/$t" -- -merge=1 -max_len=65536 >/dev/null 2>&1
  fi
done
echo "fuzz: every target ran ${seconds}s without a crash"
