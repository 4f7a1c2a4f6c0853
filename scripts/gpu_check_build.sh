# gpu_check.sh's configure and build steps, sourced by it: configure (against the LibTorch
# and the Gloo mode found), build only what the checks run, and build_chain, which runs them
# in the background and leaves NAME.state files for wait_state. Uses gpu_check.sh's variables.

configure() {  # $1: gloo mode
  local prefix="$TORCH_PREFIX;$BUNDLE"
  # The system's copies of the bundled packages are hidden, so the configure proves the bundle
  # is complete (harmless where they do not exist); liburing is given by path, so find_path
  # and find_library never search for it, and the header check after the build rejects any
  # copy outside the bundle. (Debian's /lib is /usr/lib: both spellings are listed.)
  local ignore="" d
  for d in share/cmake/nlohmann_json lib/x86_64-linux-gnu/cmake/spdlog lib/cmake/Catch2 \
    share/cmake/Gloo lib/cmake/Gloo; do ignore="$ignore;/usr/$d;/$d"; done
  ignore=${ignore#;}
  local extras=OFF
  [ "${FULL_BUILD:-0}" = 1 ] && extras=ON
  # g++: the compiler PyTorch's wheels are built with (the tree's default, clang, is chosen for
  # build speed on Debian's LibTorch; a CUDA LibTorch >= 2.12 needs C++20 headers parsed as g++ does).
  local args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_CXX_COMPILER=g++ -DCMAKE_C_COMPILER=gcc
    "-DCMAKE_PREFIX_PATH=$prefix" "-DCMAKE_IGNORE_PATH=$ignore"
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5
    "-DZERO_URING_INCLUDE_DIR=$BUNDLE/uring/include" "-DZERO_URING_LIBRARY=$BUNDLE/uring/lib/liburing.a"
    -DZERO_BUILD_TESTS=ON -DZERO_BUILD_EXAMPLES=ON "-DZERO_BUILD_BENCHMARKS=$extras" -DZERO_INSTALL=OFF
    "${NCCL_ARGS[@]}" "${CUBLAS_ARGS[@]}")
  mapfile -t -O "${#args[@]}" args < <(gloo_args "$1")
  [ "$GPU_EXPECTED" = 1 ] && args+=(-DZERO_WITH_CUDA=ON -DZERO_WITH_NCCL=ON)
  # shellcheck disable=SC2206
  [ -n "${EXTRA_CMAKE_ARGS:-}" ] && args+=($EXTRA_CMAKE_ARGS)
  echo "cmake ${args[*]}" >"$WORK/configure.log"
  timeout -k 5 150 cmake "${args[@]}" >>"$WORK/configure.log" 2>&1
}
build() {  # $@: targets
  local secs=$((T0 + BUDGET - $(date +%s)))
  [ $secs -lt 1 ] && secs=1
  echo "== ninja $*" >>"$WORK/build.log"
  timeout -k 5 "$secs" ninja -C "$BUILD" -j"$JOBS" "$@" >>"$WORK/build.log" 2>&1
}
has_target() { ninja -C "$BUILD" -t query "$1" >/dev/null 2>&1; }
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" | head -1; }

after_configure() {  # the rows that say what the configure found
  local cfg v val
  cfg=$(grep -E '^-- zero:' "$WORK/configure.log" | tail -1)
  result build configure passed "${cfg#-- zero: }"
  local bad=""
  for v in nlohmann_json_DIR spdlog_DIR Catch2_DIR Gloo_DIR ZERO_URING_INCLUDE_DIR ZERO_URING_LIBRARY; do
    val=$(cache_value "$v")
    case "$val" in "$BUNDLE"/* | "$WORK"/torch_gloo) ;; *) bad="$bad $v=${val:-unset}" ;; esac
  done
  if [ -n "$bad" ]; then
    result build bundle failed "not from the bundle:$bad"
  else
    result build bundle passed "nlohmann_json, spdlog, Catch2, Gloo and liburing from $BUNDLE (Gloo: $(cache_value Gloo_DIR))"
  fi
  for v in Torch_DIR ZERO_NCCL_LIBRARY; do result build "$v" info "$(cache_value "$v")"; done
  local torch_cuda="off"
  grep -q 'ZERO_TORCH_HAS_CUDA=1' "$BUILD/build.ninja" 2>/dev/null && torch_cuda="on"
  result build ZERO_TORCH_HAS_CUDA "$([ "$GPU_EXPECTED" = 1 ] && [ $torch_cuda = off ] && echo failed || echo info)" \
    "$torch_cuda (the CUDA paths of core/, offload/ and the engine)"
  local arch
  arch=$(ninja -C "$BUILD" -t commands zero_kernels 2>/dev/null | grep -m1 'adam\.cu' |
    grep -oE -- '(--generate-code=|-gencode[= ])[^ ]+' | sort -u | tr '\n' ' ')
  [ "$torch_cuda$arch" != off ] && result build cuda-archs info "adam.cu: ${arch:-none} (TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
  local warn
  warn=$(grep -A4 'CMake Warning' "$WORK/configure.log" | grep -v -E 'CMake Warning|^--$|^\s*$' | head -4 | tr -s ' \n' ' ')
  [ -n "$warn" ] && result build configure-warnings info "$warn"
}

build_chain() {  # runs in the background; each step leaves NAME.state holding its exit code
  trap - TERM INT EXIT
  : >"$WORK/build.log"
  local t rc
  t=$(date +%s)
  configure "$GLOO_MODE"
  rc=$?
  if [ $rc -ne 0 ]; then
    result build configure failed "exit $rc after $(($(date +%s) - t)) s: $(grep -m1 -E 'CMake Error|Error' "$WORK/configure.log" | cut -c1-150) (log: configure.log)"
    tail -30 "$WORK/configure.log" >&2
    echo $rc >"$WORK/configure.state"
    return
  fi
  after_configure
  result time configure info "$(($(date +%s) - t)) s"
  echo 0 >"$WORK/configure.state"
  [ "${STOP_AFTER_CONFIGURE:-0}" = 1 ] && return
  t=$(date +%s)
  if [ "$GLOO_MODE" = torch ] && [ "${ZERO_GLOO:-auto}" = auto ]; then
    # Probe: zero_comm and one executable that links it, against torch's Gloo. If our Gloo code
    # does not compile or link against torch's (newer) Gloo, fall back to the bundle's.
    local probe=(zero_comm)
    has_target comm_worker && probe+=(comm_worker)
    if ! build "${probe[@]}"; then
      grep -m5 -E 'error|undefined reference' "$WORK/build.log" >&2
      GLOO_MODE=bundle
      GLOO_NOTE="$GLOO_NOTE; torch's Gloo failed to build (see build.log): FELL BACK to the bundle, interposition risk"
      configure bundle || { result build configure failed "reconfigure with the bundle's Gloo failed"; echo 1 >"$WORK/nccl_build.state"; return; }
    fi
  fi
  echo "$GLOO_MODE" >"$WORK/gloo_mode"
  result build gloo info "$GLOO_MODE ($GLOO_NOTE)"
  # The NCCL test first (a subset of what the engine needs), then the rest.
  local first=() rest=() tgt
  has_target comm_nccl_test && first=(comm_nccl_test)
  for tgt in engine_cuda_test gpt_train; do has_target "$tgt" && rest+=("$tgt"); done
  [ "${FULL_BUILD:-0}" = 1 ] && rest=(all)
  if [ ${#first[@]} -gt 0 ]; then
    build "${first[@]}"
    rc=$?
    result build "${first[*]}" "$([ $rc -eq 0 ] && echo passed || echo failed)" "exit $rc, $(($(date +%s) - t)) s, -j$JOBS"
    echo $rc >"$WORK/nccl_build.state"
  else
    echo 77 >"$WORK/nccl_build.state"
  fi
  if [ ${#rest[@]} -eq 0 ]; then
    result build targets failed "neither engine_cuda_test nor gpt_train is a target"
    echo 1 >"$WORK/build.state"
    return
  fi
  build "${rest[@]}"
  rc=$?
  result build "${rest[*]}" "$([ $rc -eq 0 ] && echo passed || echo failed)" "exit $rc, $(($(date +%s) - t)) s since the build began, -j$JOBS"
  [ $rc -ne 0 ] && grep -E -m10 'error|FAILED' "$WORK/build.log" >&2
  # Headers came from the bundle (or torch): none of the bundled packages from the system, and
  # in bundle mode no gloo header from torch's include folder.
  local pattern='/usr/(local/)?include/(nlohmann|spdlog|catch2|gloo|liburing)[/.][^ ]*'
  [ "$GLOO_MODE" = bundle ] && [ -d "$TORCH_ROOT/include/gloo" ] && pattern="$pattern|$TORCH_ROOT/include/gloo/[^ ]*"
  local leaks
  leaks=$(ninja -C "$BUILD" -t deps 2>/dev/null | grep -oE "$pattern" | sort -u | head -5)
  if [ -n "$leaks" ]; then
    result build header-provenance failed "headers from outside the bundle: $(echo "$leaks" | tr '\n' ' ')"
  else
    result build header-provenance passed "no nlohmann/spdlog/catch2/gloo/liburing header from the system$([ "$GLOO_MODE" = bundle ] && echo ", no gloo header from torch")"
  fi
  # The SASS in the library is for the GPU we asked for (torch's CUDA setup cannot override it).
  local lib
  lib=$(find "$BUILD" -name 'libzero_kernels.a' | head -1)
  if [ -n "$lib" ] && grep -q 'ZERO_HAS_CUDA=1' "$BUILD/build.ninja"; then
    if [ -n "$CUOBJDUMP" ]; then
      local elfs
      elfs=$("$CUOBJDUMP" --list-elf "$lib" 2>&1 | grep -oE 'sm_[0-9]+[a-z]?' | sort -u | tr '\n' ' ')
      local want
      want=$(echo "$CUDA_ARCHS" | tr ';' '\n' | grep -v -- '-virtual' | sed -E 's/-real$//; s/^/sm_/' | tr '\n' ' ')
      local missing="" w
      for w in $want; do case " $elfs " in *" $w "*) ;; *) missing="$missing $w" ;; esac; done
      result build cuobjdump "$([ -z "$missing" ] && echo passed || echo failed)" \
        "libzero_kernels.a holds SASS for: ${elfs:-nothing}(asked: $want)${missing:+; missing:$missing}"
    else
      result build cuobjdump "$([ "$GPU_EXPECTED" = 1 ] && echo failed || echo skipped)" "cuobjdump not found"
    fi
  fi
  echo $rc >"$WORK/build.state"
}
