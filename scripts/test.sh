#!/usr/bin/env bash
# Runs every test of the project: `bash scripts/test.sh` on a fresh clone. It sets the machine
# up first (scripts/setup.sh: packages, cbindgen, the NVRTC wheel; idempotent). Named steps run
# alone, in the order given: `bash scripts/test.sh go python` (the steps are `all` below).
# With CI set, a test that cannot find NVRTC or a Vulkan adapter fails instead of skipping.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step() { printf '\n== %s\n' "$*"; }
# What the bindings' steps link against, when a step runs alone.
built() { cargo build --release; }

all=(header format deps lint rust go python cpp install fuzz demo)
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=("${all[@]}")
for s in "${steps[@]}"; do
  [[ " ${all[*]} " == *" $s "* ]] || { echo "unknown step $s (steps: ${all[*]})"; exit 2; }
done

bash scripts/setup.sh
whl=$root/.whl
export LD_LIBRARY_PATH="$whl/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Vulkan loaders warn when this is unset; a private one keeps them quiet.
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$tmp/xdg}
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"

step_header() {
  step "generated header is up to date"
  cbindgen --config cbindgen.toml --output include/vlc_compress.h --verify \
    || { echo "include/vlc_compress.h is stale: run cbindgen --config cbindgen.toml --output include/vlc_compress.h"; exit 1; }
}

step_format() {
  step "format"
  cargo fmt --all --check
  (cd python && cargo fmt --check)
}

step_deps() {
  step "the C library carries none of the command's dependencies"
  if cargo tree -e normal --no-default-features --prefix none | grep -E '^(clap|indicatif|serde_json) '; then
    echo "the library without the cli feature depends on the above"; exit 1
  fi
}

step_lint() {
  step "lint"
  cargo clippy --release --all-targets --features test-hooks -- -D warnings
}

step_rust() {
  step "rust tests (with the C harness, plain and under ASan/UBSan/LSan)"
  # Release profile: the numeric tests train real codebooks, and one build serves every step.
  # `test-hooks` adds what only tests use (a device lost on cue, emulated tensor cores).
  cargo test --release --features test-hooks
  cargo build --release
}

step_go() {
  built
  step "go binding (in the tree, through scripts/dev-pkgconfig.sh)"
  (export PKG_CONFIG_PATH=$(bash scripts/dev-pkgconfig.sh)
   cd bindings/go && go vet ./... && go test -count=1 ./... && go test -race -count=1 ./...)
}

step_python() {
  step "python package (the README's commands as written, then pytest)"
  # The README's block, run from the repository root: it makes .venv and installs ./python.
  awk '/^## Python$/{sec=1} sec && /^```sh$/{on=1; next} on && /^```$/{exit} on' README.md > "$tmp/readme-python.sh"
  grep -q "pip install ./python" "$tmp/readme-python.sh" || { echo "README's Python block not found"; exit 1; }
  bash -euo pipefail "$tmp/readme-python.sh"
  # The Ray extra and pytest; the suite runs from its own directory (Ray's workers import from
  # the driver's working directory, where python/ would shadow the installed package).
  .venv/bin/pip install -q --disable-pip-version-check "./python[ray,test]"
  (cd python/tests && ../../.venv/bin/pytest -q -p no:cacheprovider -W ignore::DeprecationWarning .)
}

step_cpp() {
  built
  step "c++ wrapper: its tests and example (C++17 and C++20, plain and under ASan/UBSan)"
  for std in c++17 c++20; do
    for prog in test example; do
      cxx=(g++ -std=$std -Wall -Wextra -Wpedantic -Werror -g -Iinclude -Ibindings/cpp "bindings/cpp/$prog.cpp"
           -Ltarget/release "-Wl,-rpath,$root/target/release" -lvlc_compress)
      "${cxx[@]}" -o "$tmp/$prog-$std" && "$tmp/$prog-$std" "$tmp"
      "${cxx[@]}" -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
        -o "$tmp/$prog-$std-asan"
      ASAN_OPTIONS=detect_leaks=1 "$tmp/$prog-$std-asan" "$tmp"
    done
  done
}

step_install() {
  built
  step "install (staged with DESTDIR), its consumers, uninstall"
  # What a packager does: install under a staging root, then build every kind of consumer
  # against the staged files exactly as they would against /usr/local.
  stage=$tmp/stage
  DESTDIR=$stage scripts/install.sh /usr/local
  inst=$stage/usr/local
  version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
  abi=$(sed -n 's/^#define VLCC_ABI_VERSION \([0-9]*\)/\1/p' include/vlc_compress.h)
  readelf -d "$inst/lib/libvlc_compress.so.$version" | grep -q "SONAME.*libvlc_compress.so.$abi\b" \
    || { echo "missing soname"; exit 1; }
  if readelf -S "$inst/lib/libvlc_compress.so.$version" | grep -q debug_info; then
    echo "the installed shared library carries debug info"; exit 1
  fi
  "$inst/bin/vlcc" --version
  # The README's C example through pkg-config, shared and static.
  awk '/^```c$/{on=1; next} /^```$/{if (on) exit} on' README.md > "$tmp/readme.c"
  export PKG_CONFIG_PATH="$inst/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage"
  cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$tmp/readme.c" $(pkg-config --cflags --libs vlc_compress) -o "$tmp/readme"
  LD_LIBRARY_PATH="$inst/lib" "$tmp/readme"
  cc -std=c11 -Wall -Wextra -Wpedantic -Werror "$tmp/readme.c" $(pkg-config --cflags vlc_compress) \
    "$inst/lib/libvlc_compress.a" $(pkg-config --static --libs-only-l vlc_compress | sed 's/-lvlc_compress//') \
    -o "$tmp/readme-static"
  "$tmp/readme-static"
  unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
  # C++17 through the CMake package, shared and static targets.
  cmake -S tests/consumers/cmake -B "$tmp/cmake-consumer" -DCMAKE_PREFIX_PATH="$inst" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$tmp/cmake-consumer" -j 2
  LD_LIBRARY_PATH="$inst/lib" "$tmp/cmake-consumer/consumer"
  "$tmp/cmake-consumer/consumer_static"
  LD_LIBRARY_PATH="$inst/lib" "$tmp/cmake-consumer/wrapper_test" "$tmp"
  # Go: as the README says to today (the module path is not published): a `replace` naming
  # this tree's binding, no proxy, built against the staged library through pkg-config.
  cp -r tests/consumers/go "$tmp/go-consumer"
  (cd "$tmp/go-consumer" \
    && export GOPROXY=off GOSUMDB=off GOFLAGS="-mod=mod -modcacherw" GOMODCACHE=$tmp/gomodcache GOCACHE=$tmp/gocache \
       PKG_CONFIG_PATH="$inst/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$stage" \
    && go mod edit -require=vlc-compress.dev/vlccompress@v0.0.0 \
         -replace=vlc-compress.dev/vlccompress="$root/bindings/go" \
    && go mod tidy && go build -o consumer . && LD_LIBRARY_PATH="$inst/lib" ./consumer)
  # Uninstall removes every file the install wrote.
  DESTDIR=$stage scripts/install.sh --uninstall /usr/local
  left=$(find "$stage" -type f -o -type l)
  [ -z "$left" ] || { echo "uninstall left: $left"; exit 1; }
}

step_fuzz() {
  step "fuzz targets, about a minute each (long runs: scripts/fuzz.sh SECONDS --merge)"
  bash scripts/fuzz.sh 60
}

step_demo() {
  built
  step "cli demo"
  target/release/vlcc demo
}

for s in "${steps[@]}"; do "step_$s"; done

echo
echo "test steps passed: ${steps[*]}"
