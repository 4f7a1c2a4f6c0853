#!/usr/bin/env bash
# Compiles, syntax only, every source of the tree that holds a ZERO_TORCH_HAS_CUDA block with
# that block switched on, against this machine's LibTorch headers and the CUDA toolkit: code
# that only a LibTorch built with CUDA compiles cannot rot here unseen. The LibTorch of a CPU
# build lacks c10/cuda/impl/cuda_cmake_macros.h (CMake writes it only for CUDA builds); an
# empty stand-in is all the other c10/cuda headers need from it.
# Usage: cuda_blocks_syntax.sh SOURCE_DIR CXX INCLUDE_DIR...
set -euo pipefail
src=$1 cxx=$2
shift 2
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
mkdir -p "$stub/c10/cuda/impl"
: > "$stub/c10/cuda/impl/cuda_cmake_macros.h"

flags=(-fsyntax-only -std=c++17 -D_GLIBCXX_USE_CXX11_ABI=1 -DSPDLOG_COMPILED_LIB
       -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -DFMT_SHARED -DUSE_C10D_GLOO -DUSE_DISTRIBUTED
       -DZERO_HAS_CUDA=1 -DZERO_HAS_NCCL=1 -DZERO_TORCH_HAS_CUDA=1
       -Wall -Wextra -Wno-unused-parameter -Werror
       -I"$src/include" -I"$src/engine" -isystem "$stub")
for d in "$@"; do
  case $d in /usr/include | /usr/local/include) ;;  # already searched; -isystem would reorder
    *) flags+=(-isystem "$d") ;; esac
done

# The switch must reach the compiler, or every block below would be skipped and pass.
probe=$stub/probe.cpp
printf '#if ZERO_TORCH_HAS_CUDA && ZERO_HAS_NCCL\n#error switched on\n#endif\n' > "$probe"
if "$cxx" "${flags[@]}" "$probe" 2>/dev/null; then
  echo "FAIL: the probe compiled: ZERO_TORCH_HAS_CUDA is not switched on" >&2
  exit 1
fi

cd "$src"
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.h' 2>/dev/null | xargs grep -l 'ZERO_TORCH_HAS_CUDA' || true)
if [ "${#files[@]}" -eq 0 ]; then
  mapfile -t files < <(grep -rl --include='*.cpp' --include='*.h' 'ZERO_TORCH_HAS_CUDA' \
    include core comm offload engine kernels checkpoint monitor tools tests examples benchmarks 2>/dev/null)
fi
[ "${#files[@]}" -gt 0 ] || { echo "FAIL: no file with a ZERO_TORCH_HAS_CUDA block found" >&2; exit 1; }

failed=0
for f in "${files[@]}"; do
  case $f in *.h) continue ;; esac  # headers are compiled through the sources that include them
  if "$cxx" "${flags[@]}" -I"$(dirname "$f")" "$f"; then
    echo "ok   $f"
  else
    echo "FAIL $f" >&2
    failed=1
  fi
done
exit $failed
