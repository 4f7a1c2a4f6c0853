#!/usr/bin/env bash
# Copies what our build needs beyond LibTorch and CUDA out of this machine's Debian packages
# into .gpu_deps/ (git-ignored), to be carried to a GPU machine that has no -dev packages.
#
#   scripts/gpu_deps.sh [DEST]        (default DEST: <repo>/.gpu_deps; idempotent)
#
# Layout (each a CMake prefix; scripts/gpu_check.sh puts them on CMAKE_PREFIX_PATH):
#   include/nlohmann, share/cmake/nlohmann_json   nlohmann/json (header-only), Debian's config
#   include/catch2, lib/cmake/Catch2               Catch2 v2 (single header), our config
#   include/spdlog (+ spdlog/fmt/bundled = fmt)    spdlog header-only with fmt as its bundled
#                                                  copy, so torch's own fmt headers cannot mix in
#   gloo/include/gloo, gloo/lib, gloo/share/cmake/Gloo
#                                                  Debian's libgloo + the shared libraries it
#                                                  needs (hiredis, ibverbs, libnl), a fallback for
#                                                  a torch without usable embedded Gloo
#   uring/include (liburing.h, liburing/), uring/lib/liburing.a
#                                                  liburing for offload/'s io_uring engine,
#                                                  static so nothing is needed at run time
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${1:-$ROOT/.gpu_deps}

need_pkg() {
  if ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; then
    echo "gpu_deps: Debian package $1 is missing (run scripts/setup.sh)" >&2
    exit 1
  fi
}
for p in nlohmann-json3-dev libspdlog-dev libfmt-dev catch2 libgloo-dev liburing-dev; do need_pkg "$p"; done
pkg_version() { dpkg-query -W -f='${Version}' "$1"; }

# Build into a temporary folder and swap it in at the end, so a failed run leaves the old bundle.
TMP="$DEST.tmp.$$"
rm -rf "$TMP"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/include" "$TMP/share/cmake" "$TMP/lib/cmake"

# --- nlohmann/json: headers and Debian's relocatable config (prefix = 3 levels up). ---
cp -a /usr/include/nlohmann "$TMP/include/"
cp -a /usr/share/cmake/nlohmann_json "$TMP/share/cmake/"

# --- Catch2 v2: the header, and a config with the target our tests link. ---
cp -a /usr/include/catch2 "$TMP/include/"
catch_version=$(sed -n 's/^#define CATCH_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' \
  /usr/include/catch2/catch.hpp | paste -sd.)
mkdir -p "$TMP/lib/cmake/Catch2"
cat >"$TMP/lib/cmake/Catch2/Catch2Config.cmake" <<'EOF'
# Catch2 v2 (header-only), copied by scripts/gpu_deps.sh from Debian's catch2 package.
get_filename_component(_catch2_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET Catch2::Catch2)
  add_library(Catch2::Catch2 INTERFACE IMPORTED)
  set_target_properties(Catch2::Catch2 PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_catch2_prefix}/include"
    INTERFACE_COMPILE_FEATURES cxx_std_11)
endif()
unset(_catch2_prefix)
EOF

# --- spdlog header-only, with fmt copied in as spdlog's "bundled" fmt. ---
# Debian builds spdlog against an external fmt (SPDLOG_FMT_EXTERNAL); a pip torch may ship
# its own, newer fmt headers in torch/include, which would then win the include search.
# With fmt under spdlog/fmt/bundled and SPDLOG_FMT_EXTERNAL unset, spdlog finds exactly
# these fmt headers (header-only: FMT_HEADER_ONLY, set by spdlog/fmt/fmt.h).
cp -a /usr/include/spdlog "$TMP/include/"
# Debian's tweakme.h hard-codes SPDLOG_FMT_EXTERNAL; undo that one line.
sed -i 's|^#define SPDLOG_FMT_EXTERNAL 1$|// SPDLOG_FMT_EXTERNAL left undefined by scripts/gpu_deps.sh: fmt is bundled|' \
  "$TMP/include/spdlog/tweakme.h"
if grep -q '^#define SPDLOG_FMT_EXTERNAL' "$TMP/include/spdlog/tweakme.h"; then
  echo "gpu_deps: could not undo SPDLOG_FMT_EXTERNAL in spdlog/tweakme.h" >&2
  exit 1
fi
mkdir -p "$TMP/include/spdlog/fmt/bundled"
cp -a /usr/include/fmt/. "$TMP/include/spdlog/fmt/bundled/"
spdlog_version=$(sed -n 's/^#define SPDLOG_VER_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' \
  /usr/include/spdlog/version.h | paste -sd.)
mkdir -p "$TMP/lib/cmake/spdlog"
cat >"$TMP/lib/cmake/spdlog/spdlogConfig.cmake" <<'EOF'
# spdlog, header-only, with its fmt under spdlog/fmt/bundled (scripts/gpu_deps.sh). No
# SPDLOG_FMT_EXTERNAL: no fmt library and no other fmt headers are involved.
get_filename_component(_spdlog_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET spdlog::spdlog)
  find_package(Threads REQUIRED)
  add_library(spdlog::spdlog INTERFACE IMPORTED)
  set_target_properties(spdlog::spdlog PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${_spdlog_prefix}/include"
    INTERFACE_LINK_LIBRARIES Threads::Threads)
  add_library(spdlog::spdlog_header_only INTERFACE IMPORTED)
  set_target_properties(spdlog::spdlog_header_only PROPERTIES
    INTERFACE_LINK_LIBRARIES spdlog::spdlog)
endif()
unset(_spdlog_prefix)
EOF

write_version_file() {  # NAME VERSION DIR
  cat >"$3/$1ConfigVersion.cmake" <<EOF
# $1 $2 (scripts/gpu_deps.sh): any requested version <= $2 with the same major matches.
set(PACKAGE_VERSION "$2")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR
   (PACKAGE_FIND_VERSION AND NOT PACKAGE_FIND_VERSION_MAJOR EQUAL "${2%%.*}"))
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF
}
write_version_file Catch2 "$catch_version" "$TMP/lib/cmake/Catch2"
write_version_file spdlog "$spdlog_version" "$TMP/lib/cmake/spdlog"

# --- Gloo: headers, libgloo.so and the shared libraries it needs that a bare machine lacks. ---
G="$TMP/gloo"
mkdir -p "$G/include" "$G/lib" "$G/share/cmake/Gloo"
cp -a /usr/include/gloo "$G/include/"
gloo_so=$(readlink -f /usr/lib/libgloo.so)
cp -a "$gloo_so" "$G/lib/"
ln -s "$(basename "$gloo_so")" "$G/lib/libgloo.so.0"
ln -s libgloo.so.0 "$G/lib/libgloo.so"
# Everything libgloo links except the C/C++ runtime (glibc, libstdc++, libgcc_s), which the
# GPU machine has (newer there; check GLIBC_ versions in docs/gpu.md).
ldd "$gloo_so" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | libpthread.so* | libdl.so* | ld-linux*) ;;
    *) cp -aL "$lib" "$G/lib/" ;;
  esac
done
cat >"$G/share/cmake/Gloo/GlooConfig.cmake" <<EOF
# Debian's Gloo ($(pkg_version libgloo-dev)), relocated by scripts/gpu_deps.sh. At run time the
# libraries in ../../../lib must be found: scripts/gpu_check.sh puts them on LD_LIBRARY_PATH.
get_filename_component(_gloo_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET gloo)
  add_library(gloo SHARED IMPORTED)
  set_target_properties(gloo PROPERTIES
    IMPORTED_LOCATION "\${_gloo_prefix}/lib/$(basename "$gloo_so")"
    IMPORTED_SONAME "libgloo.so.0"
    INTERFACE_INCLUDE_DIRECTORIES "\${_gloo_prefix}/include"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,\${_gloo_prefix}/lib"
    # A plain -I, searched before every -isystem: a torch that ships its own include/gloo
    # (-isystem, as every imported target's) cannot shadow the headers of this libgloo.
    SYSTEM FALSE)
endif()
set(Gloo_FOUND TRUE)
unset(_gloo_prefix)
EOF

# --- liburing: the header, its folder and the static library (position-independent code). ---
U="$TMP/uring"
mkdir -p "$U/include" "$U/lib"
cp -a /usr/include/liburing.h /usr/include/liburing "$U/include/"
cp -a /usr/lib/x86_64-linux-gnu/liburing.a "$U/lib/"

{
  echo "# Made by scripts/gpu_deps.sh on $(date -u +%Y-%m-%dT%H:%MZ) from these Debian packages:"
  for p in nlohmann-json3-dev catch2 libspdlog-dev libfmt-dev libgloo-dev libgloo0 libhiredis0.14 \
    libibverbs1 libnl-3-200 libnl-route-3-200 liburing-dev; do
    printf '%s %s\n' "$p" "$(pkg_version "$p" 2>/dev/null || echo '?')"
  done
  echo "# glibc symbol versions the carried shared libraries need (the GPU machine must have them):"
  for f in "$G"/lib/*.so.*; do
    [ -L "$f" ] && continue
    printf '%s %s\n' "$(basename "$f")" \
      "$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  done
} >"$TMP/MANIFEST"

rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
echo "gpu_deps: wrote $DEST ($(du -sh "$DEST" | cut -f1), $(find "$DEST" -type f | wc -l) files)"
