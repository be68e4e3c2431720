#!/usr/bin/env bash
# Installs vlc_compress: the shared library (stripped, with the soname of the C ABI version:
# lib/libvlc_compress.so.ABI -> .so.VERSION, plus the .so link for linkers), the static library
# (debug info stripped), the C header and C++ wrapper, a pkg-config file, a CMake package
# (find_package(vlc_compress) gives vlc_compress::vlc_compress and
# vlc_compress::vlc_compress_static), the `vlcc` command, and a manifest of what it wrote.
#
#   scripts/install.sh [PREFIX]                  # PREFIX defaults to /usr/local
#   DESTDIR=/tmp/stage scripts/install.sh /usr   # staged: files land in /tmp/stage/usr/...
#   LIBDIR=lib64 BINDIR=... INCLUDEDIR=... scripts/install.sh PREFIX   # relative to PREFIX or absolute
#   scripts/install.sh --uninstall [PREFIX]      # removes what the manifest lists (same DESTDIR, LIBDIR)
#
#   cc app.c $(pkg-config --cflags --libs vlc_compress)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

uninstall=0
if [ "${1:-}" = --uninstall ]; then
  uninstall=1
  shift
fi
prefix=${1:-${PREFIX:-/usr/local}}
dest=${DESTDIR:-}
case $prefix in
  /*) ;;
  *) mkdir -p "$prefix" && prefix=$(cd "$prefix" && pwd) ;;
esac
under() { case $1 in /*) echo "$1" ;; *) echo "$prefix/$1" ;; esac; }
libdir=$(under "${LIBDIR:-lib}")
bindir=$(under "${BINDIR:-bin}")
includedir=$(under "${INCLUDEDIR:-include}")
manifest=$libdir/vlc_compress/install_manifest.txt

if [ $uninstall = 1 ]; then
  [ -f "$dest$manifest" ] || { echo "no manifest at $dest$manifest: nothing installed there"; exit 1; }
  while IFS= read -r f; do
    rm -f "$dest$f"
  done < "$dest$manifest"
  rm -f "$dest$manifest"
  for d in "$libdir/vlc_compress" "$libdir/cmake/vlc_compress" "$libdir/cmake" "$libdir/pkgconfig"; do
    rmdir "$dest$d" 2>/dev/null || true
  done
  echo "uninstalled vlc_compress from $dest$prefix"
  exit 0
fi

VLCC_SONAME=1 cargo build --release --lib --bin vlcc -q
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
abi=$(sed -n 's/^const ABI_VERSION: u32 = \([0-9]*\);/\1/p' src/ffi/version.rs)
staged=()
put() { # put MODE SRC DST: installs a file and records it
  install -D -m "$1" "$2" "$dest$3"
  staged+=("$3")
}
link() { # link TARGET NAME
  ln -sf "$1" "$dest$2"
  staged+=("$2")
}
text() { # text DST: installs stdin as a file
  mkdir -p "$(dirname "$dest$1")"
  cat > "$dest$1"
  staged+=("$1")
}

so=libvlc_compress.so
put 0755 target/release/$so "$libdir/$so.$version"
strip --strip-unneeded "$dest$libdir/$so.$version"
link "$so.$version" "$libdir/$so.$abi"
link "$so.$abi" "$libdir/$so"
put 0644 target/release/libvlc_compress.a "$libdir/libvlc_compress.a"
strip --strip-debug "$dest$libdir/libvlc_compress.a"
put 0755 target/release/vlcc "$bindir/vlcc"
strip "$dest$bindir/vlcc"
put 0644 include/vlc_compress.h "$includedir/vlc_compress.h"
put 0644 bindings/cpp/vlc_compress.hpp "$includedir/vlc_compress.hpp"
# The in-tree library goes back to having no soname, as the tests and bindings link it.
cargo build --release --lib -q

private="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
text "$libdir/pkgconfig/vlc_compress.pc" <<PC
prefix=$prefix
libdir=$libdir
includedir=$includedir

Name: vlc_compress
Description: Compact codes for float embeddings: training, encoding, compressed search
Version: $version
Libs: -L\${libdir} -lvlc_compress
Libs.private: $private
Cflags: -I\${includedir}
PC

# The CMake package finds its files relative to itself, so a staged copy works as well.
rel_include=$(realpath -m --relative-to="$libdir" "$includedir")
text "$libdir/cmake/vlc_compress/vlc_compressConfig.cmake" <<CMAKE
# vlc_compress $version: find_package(vlc_compress) gives vlc_compress::vlc_compress (shared)
# and vlc_compress::vlc_compress_static.
get_filename_component(_vlcc_libdir "\${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
get_filename_component(_vlcc_include "\${_vlcc_libdir}/$rel_include" ABSOLUTE)
if(NOT TARGET vlc_compress::vlc_compress)
  add_library(vlc_compress::vlc_compress SHARED IMPORTED)
  set_target_properties(vlc_compress::vlc_compress PROPERTIES
    IMPORTED_LOCATION "\${_vlcc_libdir}/$so.$version"
    IMPORTED_SONAME "$so.$abi"
    INTERFACE_INCLUDE_DIRECTORIES "\${_vlcc_include}")
  add_library(vlc_compress::vlc_compress_static STATIC IMPORTED)
  set_target_properties(vlc_compress::vlc_compress_static PROPERTIES
    IMPORTED_LOCATION "\${_vlcc_libdir}/libvlc_compress.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_vlcc_include}"
    INTERFACE_LINK_LIBRARIES "gcc_s;util;rt;pthread;m;dl")
endif()
unset(_vlcc_libdir)
unset(_vlcc_include)
CMAKE
text "$libdir/cmake/vlc_compress/vlc_compressConfigVersion.cmake" <<CMAKE
# Compatible within the same C ABI version ($abi), as the soname says.
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION_MAJOR AND NOT PACKAGE_FIND_VERSION_MAJOR STREQUAL "${version%%.*}")
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
CMAKE

staged+=("$manifest")
mkdir -p "$(dirname "$dest$manifest")"
printf '%s\n' "${staged[@]}" > "$dest$manifest"
echo "installed vlc_compress $version into $dest$prefix:"
for f in "${staged[@]}"; do
  if [ -L "$dest$f" ]; then
    echo "  $f -> $(readlink "$dest$f")"
  else
    echo "  $f ($(stat -c %s "$dest$f") bytes)"
  fi
done
