#!/usr/bin/env bash
# Installs libvlc_compress into PREFIX: the shared library with its soname
# (lib/libvlc_compress.so.ABI -> .so.VERSION, plus the .so link for linkers; ABI is the C
# ABI's version, VLCC_ABI_VERSION), the static
# library, the C header and C++ wrapper, and a pkg-config file:
#
#   scripts/install.sh /usr/local            # builds in release mode first
#   cc app.c $(pkg-config --cflags --libs vlc_compress)
set -euo pipefail
prefix=${1:?usage: install.sh PREFIX}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VLCC_SONAME=1 cargo build --release --lib -q
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
major=$(sed -n 's/^const ABI_VERSION: u32 = \([0-9]*\);/\1/p' src/ffi/version.rs)
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
lib=$prefix/lib
install -d "$lib/pkgconfig" "$prefix/include"
install -m 0755 target/release/libvlc_compress.so "$lib/libvlc_compress.so.$version"
ln -sf "libvlc_compress.so.$version" "$lib/libvlc_compress.so.$major"
ln -sf "libvlc_compress.so.$major" "$lib/libvlc_compress.so"
install -m 0644 target/release/libvlc_compress.a "$lib/libvlc_compress.a"
install -m 0644 include/vlc_compress.h "$prefix/include/vlc_compress.h"
install -m 0644 bindings/cpp/vlc_compress.hpp "$prefix/include/vlc_compress.hpp"
# Relink the in-tree library without the soname, as the tests and bindings use it.
cargo build --release --lib -q
cat > "$lib/pkgconfig/vlc_compress.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: vlc_compress
Description: Compact codes for float embeddings: training, encoding, compressed search
Version: $version
Libs: -L\${libdir} -lvlc_compress
Libs.private: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
Cflags: -I\${includedir}
PC
echo "installed vlc_compress $version into $prefix"
