#!/usr/bin/env bash
# Sets up this machine for the tests (`scripts/test.sh` calls it first): Debian packages incl.
# the software Vulkan driver, the pinned cbindgen CLI, and the NVRTC wheel in .whl/. Every step
# is idempotent: a second run installs nothing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

step() { printf '\n== %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

step "system packages"
missing=()
command -v go >/dev/null || missing+=(golang-go)
command -v pkg-config >/dev/null || missing+=(pkg-config)
command -v g++ >/dev/null || missing+=(g++)
command -v readelf >/dev/null || missing+=(binutils)
command -v cmake >/dev/null || missing+=(cmake)
# The WGPU tests run for real on lavapipe, Mesa's software Vulkan driver.
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || missing+=(mesa-vulkan-drivers)
ldconfig -p | grep -q 'libvulkan\.so\.1' || missing+=(libvulkan1)
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

step "toolchain"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
CBINDGEN_VERSION=0.29.4
if ! cbindgen --version 2>/dev/null | grep -qF "$CBINDGEN_VERSION"; then
  cargo install --locked cbindgen --version "$CBINDGEN_VERSION"
fi

step "NVRTC (the CUDA kernels compile in the tests, GPU or not)"
# Pinned to the CUDA 13.0 line: a newer NVRTC writes PTX that 13.0 drivers refuse.
whl=$root/.whl
if [ ! -e "$whl/nvidia/cu13/lib/libnvrtc.so.13" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1; then
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-pip
  fi
  python3 -m pip install -q --disable-pip-version-check --target "$whl" \
    nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96
fi

# Python's venv module with pip, which the Python step needs.
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
if ! python3 -m venv "$probe/venv" >/dev/null 2>&1; then
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv
fi
