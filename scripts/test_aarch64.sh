#!/usr/bin/env bash
# Runs the library's unit tests as aarch64 code under qemu, so the NEON kernels are checked
# against their scalar references from an x86 machine: `bash scripts/test_aarch64.sh`.
# Installs the cross linker, qemu and the Rust target first. Not part of `scripts/test.sh`:
# the cross build takes several minutes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross
fi
rustup target add aarch64-unknown-linux-gnu

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
# The library alone (no WGPU, no CLI): its unit tests hold every kernel's reference check.
# One test re-runs its own binary as a child process, which qemu's user mode cannot start
# without a binfmt handler; it runs natively in scripts/test.sh.
cargo test --release --target aarch64-unknown-linux-gnu --no-default-features --lib -- \
  --skip caught_panics_stay_off_stderr "$@"
