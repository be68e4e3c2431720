#!/usr/bin/env bash
# Writes a vlc_compress.pc for the source tree (headers in include/, the library in
# target/release, found at run time through an rpath) and prints its directory, for
# `export PKG_CONFIG_PATH=$(bash scripts/dev-pkgconfig.sh)` before building the Go binding
# or any other pkg-config consumer against an uninstalled build.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=$root/target/pkgconfig
mkdir -p "$dir"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)
cat > "$dir/vlc_compress.pc" <<PC
libdir=$root/target/release
includedir=$root/include

Name: vlc_compress
Description: Compact codes for float embeddings (uninstalled build)
Version: $version
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lvlc_compress
Cflags: -I\${includedir}
PC
echo "$dir"
