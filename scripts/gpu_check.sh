#!/usr/bin/env bash
# gpu_check.sh: on a CUDA machine without internet or Debian -dev packages, checks the GPU path
# in phases ordered by truth per second, each under its own time limit, and prints one table.
# Built against the installed PyTorch's LibTorch plus the carried bundle (.gpu_deps/, made on
# the dev machine by scripts/gpu_deps.sh). Budgets and the device call: docs/gpu.md.
# Its run control (rows, phases, limits, the final table) is in gpu_check_run.sh, its
# configure and build steps in gpu_check_build.sh; both are sourced.
#
#   0 probe     nvidia-smi, toolkit and torch versions, where the CUDA libraries live, torch's
#               own CUDA and NCCL (all_reduce at world 1): "the machine works" apart from us
#   1 kernels   kernels_cuda_test and cuda_adam_bench built by nvcc alone (no CMake, no
#               LibTorch), the test plain and under compute-sanitizer, the bandwidth bench
#   2 build     configure + ninja of only what phases 3-5 run, in the background from the
#               start of phase 1 (the NCCL test first)
#   3 nccl      comm_nccl_test
#   4 engine    engine_cuda_test: the engine on CUDA against its CPU twin, stages 0-3 x dtypes
#   5 gpt       the example GPT, stages 0 and 3 x fp32/bf16/fp16; a row passes only if the
#               loss falls by at least 10 % (final <= 0.9 x first)
#
# Every result line goes at once to build-gpu-check/gpu_check/results.tsv and, when
# GPU_CHECK_OUT is set, to $GPU_CHECK_OUT/results.tsv; a run that is killed (TERM, INT) or
# runs out of its budget still writes summary.txt / summary.json. Exits non-zero when
# anything failed or timed out (on a GPU machine, also when a GPU check was skipped).
#
# Settings (environment):
#   TORCH_CMAKE_PREFIX  LibTorch's CMake prefix; default: python3's torch.utils.cmake_prefix_path.
#                       /usr = Debian's CPU LibTorch (GPU parts then report "skipped").
#   GPU_DEPS            the bundle (default <repo>/.gpu_deps)
#   BUILD_DIR           build folder (default <repo>/build-gpu-check; reused when present)
#   ZERO_GLOO           auto | torch | bundle: which Gloo zero_comm builds against (default auto:
#                       torch's embedded Gloo when its wheel ships the headers and exports the
#                       symbols, else the bundle's Debian libgloo)
#   CUDA_ARCHS          CMAKE_CUDA_ARCHITECTURES (default 90: H100/H200); TORCH_CUDA_ARCH_LIST
#                       is derived from it unless set
#   JOBS                build jobs (default nproc)
#   GPT_STEPS           optimizer steps per GPT run (default 20)
#   GPT_STAGES          ZeRO stages of the GPT runs (default "0 3")
#   GPT_CPU             without a GPU: the dtypes to run the GPT in on the CPU (default bf16),
#                       or skip
#   BENCH_ARGS          extra arguments for cuda_adam_bench (e.g. "--iters 10")
#   FULL_BUILD=1        build every target (benchmarks included), not only what the checks run
#   STOP_AFTER_CONFIGURE=1  end once the configure is done (the kernel phase still runs)
#   GPU_CHECK_BUDGET    seconds for the whole run (default 510 with a GPU, 3600 without): later
#                       phases are cut short, and say so, rather than the caller's timeout
#                       killing the run
#   EXTRA_CMAKE_ARGS    appended to the configure command
#   GPU_CHECK_OUT       a folder that receives results.tsv (live), summary.txt, summary.json and
#                       a tarball of the logs
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
T0=$(date +%s)
BUNDLE=${GPU_DEPS:-$ROOT/.gpu_deps}
BUNDLE=$(cd "$BUNDLE" 2>/dev/null && pwd || echo "$BUNDLE")
BUILD=${BUILD_DIR:-$ROOT/build-gpu-check}
JOBS=${JOBS:-$(nproc)}
CUDA_ARCHS=${CUDA_ARCHS:-90}
GPT_STEPS=${GPT_STEPS:-20}
GPT_STAGES=${GPT_STAGES:-0 3}
WORK="$BUILD/gpu_check"
mkdir -p "$WORK"
rm -f "$WORK"/*.state "$WORK"/*.log "$WORK"/*.json "$WORK"/gloo_mode
RESULTS="$WORK/results.tsv"  # section \t name \t status \t detail  (one line per check)
: >"$RESULTS"
OUT=${GPU_CHECK_OUT:-}
if [ -n "$OUT" ]; then mkdir -p "$OUT" && : >"$OUT/results.tsv"; fi
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
GPU_EXPECTED=0
CHAIN_PID=""
CHILD=""
BG_PIDS=()
KILLED=""
FINISHING=""

. "$ROOT/scripts/gpu_check_run.sh"  # result, phase_start, run_limited, finish, ...

# The first signal wins; later ones (see finish) are ignored from here on.
trap 'trap "" TERM INT; KILLED=TERM; exit 143' TERM
trap 'trap "" TERM INT; KILLED=INT; exit 130' INT
trap finish EXIT

# ================================================================ 0 probe
phase_start probe 45
BUDGET=${GPU_CHECK_BUDGET:-3600}
command -v python3 >/dev/null || { echo "gpu_check: python3 not found" >&2; exit 1; }
[ -d "$BUNDLE/include/nlohmann" ] || die "no bundle at $BUNDLE: run scripts/gpu_deps.sh on the dev machine and carry it"
[ -f "$BUNDLE/uring/lib/liburing.a" ] || die "the bundle at $BUNDLE has no liburing (made by an older scripts/gpu_deps.sh): run it again"
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  GPU_EXPECTED=1
  result probe nvidia-smi info "$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>&1 | head -1)"
else
  result probe nvidia-smi info "no GPU listed (nvidia-smi $(command -v nvidia-smi >/dev/null && echo present || echo absent))"
fi
if [ -n "${TORCH_CMAKE_PREFIX:-}" ]; then
  TORCH_PREFIX=$TORCH_CMAKE_PREFIX
else
  TORCH_PREFIX=$(timeout 60 python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    die "python3 cannot import torch (set TORCH_CMAKE_PREFIX)"
fi
[ "$GPU_EXPECTED" = 1 ] && BUDGET=${GPU_CHECK_BUDGET:-510}
PHASE_END=$((T0 + 45))
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME_DIR=""
if [ -x "$NVCC" ]; then
  CUDA_HOME_DIR=$(cd "$(dirname "$NVCC")/.." && pwd)
  result probe nvcc info "$NVCC: $("$NVCC" --version | tail -2 | head -1)"
else
  NVCC=""
  result probe nvcc "$([ "$GPU_EXPECTED" = 1 ] && echo failed || echo skipped)" "no nvcc on PATH or in /usr/local/cuda/bin"
fi
for tool in cmake ninja; do
  command -v $tool >/dev/null || result probe $tool failed "$tool not found"
done
result probe tools info "cmake $(cmake --version 2>/dev/null | head -1 | awk '{print $3}'), ninja $(ninja --version 2>/dev/null), $(python3 --version 2>&1)"
SANITIZER=$(command -v compute-sanitizer || true)
for s in "$CUDA_HOME_DIR/bin/compute-sanitizer" "$CUDA_HOME_DIR/compute-sanitizer/compute-sanitizer"; do
  [ -z "$SANITIZER" ] && [ -x "$s" ] && SANITIZER=$s
done
CUOBJDUMP=$(command -v cuobjdump || true)
[ -z "$CUOBJDUMP" ] && [ -x "$CUDA_HOME_DIR/bin/cuobjdump" ] && CUOBJDUMP=$CUDA_HOME_DIR/bin/cuobjdump

# Torch's own folder (pip: <site-packages>/torch; Debian: /usr) and libtorch_cpu.so.
TORCH_ROOT=$(cd "$TORCH_PREFIX/../.." 2>/dev/null && pwd)
TORCH_CPU_LIB=""
for d in "$TORCH_ROOT/lib" /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
  [ -e "$d/libtorch_cpu.so" ] && { TORCH_CPU_LIB="$d/libtorch_cpu.so"; break; }
done

# Where the CUDA libraries live: the toolkit, or the pip nvidia-* wheels torch loads.
SITE_DIRS=$(timeout 20 python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
wheel_lib() {  # NAME-GLOB: the first match under site-packages/nvidia
  local s f
  for s in $SITE_DIRS; do
    f=$(find "$s/nvidia" -name "$1" 2>/dev/null | sort | head -1)
    [ -n "$f" ] && { echo "$f"; return; }
  done
}
toolkit_lib() { ls "$CUDA_HOME_DIR"/lib64/$1 "$CUDA_HOME_DIR"/lib/$1 2>/dev/null | head -1; }
CUBLAS_ARGS=()
if [ -n "$CUDA_HOME_DIR" ]; then
  cudart=$(toolkit_lib 'libcudart.so*')
  cublas=$(toolkit_lib 'libcublas.so*')
  nvtx3=$([ -d "$CUDA_HOME_DIR/include/nvtx3" ] && echo "$CUDA_HOME_DIR/include/nvtx3" || echo none)
  if [ -z "$cublas" ]; then
    # No cuBLAS in the toolkit: point CMake at the wheel's, which torch loads anyway.
    cublas=$(wheel_lib 'libcublas.so*')
    cublaslt=$(wheel_lib 'libcublasLt.so*')
    [ -n "$cublas" ] && CUBLAS_ARGS=("-DCUDA_cublas_LIBRARY=$cublas")
    [ -n "$cublaslt" ] && CUBLAS_ARGS+=("-DCUDA_cublasLt_LIBRARY=$cublaslt")
    cublas="${cublas:-none} (not in the toolkit)"
  fi
  result probe cuda-libs info "cudart ${cudart:-none}; cublas $cublas; nvtx3 $nvtx3"
fi
result probe sanitizer info "compute-sanitizer ${SANITIZER:-absent}, cuobjdump ${CUOBJDUMP:-absent}"

# Torch's own view of the machine, when python's torch is the LibTorch we build against: its
# CUDA against the CPU, and its NCCL at world 1. It separates "CUDA or NCCL is broken in this
# VM" from bugs of ours.
if [ -z "${TORCH_CMAKE_PREFIX:-}" ]; then
  cat >"$WORK/probe_torch.py" <<'PY'
import os, sys, time
import torch
t = f"torch {torch.__version__}, CUDA {torch.version.cuda}, _GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
c = torch.cuda.is_available()
print(f"ROW\ttorch\tinfo\t{t}, device: {torch.cuda.get_device_name(0) if c else 'none'}")
if not c:
    print("ROW\ttorch-cuda\tskipped\ttorch sees no CUDA device")
    sys.exit(0)
try:
    a = torch.randn(512, 512, dtype=torch.float64)
    ok = torch.allclose((a.cuda() @ a.cuda()).cpu(), a @ a, rtol=1e-9, atol=1e-9)
    print(f"ROW\ttorch-cuda\t{'passed' if ok else 'failed'}\tfp64 512x512 matmul on {torch.cuda.get_device_name(0)} vs CPU, capability {torch.cuda.get_device_capability(0)}")
except Exception as e:
    print(f"ROW\ttorch-cuda\tfailed\t{type(e).__name__}: {str(e)[:150]}")
try:
    import torch.distributed as dist
    v = torch.cuda.nccl.version()
    t0 = time.time()
    dist.init_process_group("nccl", init_method="file://" + os.path.join(sys.argv[1], "nccl_store"),
                            rank=0, world_size=1, device_id=torch.device("cuda:0"))
    x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ok = bool(torch.equal(x, torch.arange(1 << 20, dtype=torch.float32, device="cuda")))
    dist.destroy_process_group()
    print(f"ROW\ttorch-nccl\t{'passed' if ok else 'failed'}\tNCCL {'.'.join(map(str, v))}: all_reduce at world 1 in {time.time() - t0:.1f} s")
except Exception as e:
    print(f"ROW\ttorch-nccl\tfailed\t{type(e).__name__}: {str(e)[:150]}")
PY
  run_limited "$(limit 40)" "$WORK/probe_torch.log" python3 "$WORK/probe_torch.py" "$WORK"
  rc=$?
  rm -f "$WORK/nccl_store"
  grep '^ROW' "$WORK/probe_torch.log" | while IFS=$'\t' read -r _ name status detail; do
    result probe "$name" "$status" "$detail"
  done
  grep -q '^ROW.torch-nccl' "$WORK/probe_torch.log" || [ $rc -eq 0 ] ||
    gpu_result probe torch-probe $rc "exit $rc: $(last_line "$WORK/probe_torch.log")"
  grep -q '^ROW.torch-cuda.passed' "$WORK/probe_torch.log" && GPU_EXPECTED=1
else
  result probe torch info "LibTorch at $TORCH_PREFIX (python's torch not consulted)"
fi

# ---------------------------------------------------------------- Gloo: torch's or the bundle's
# pip torch links Gloo statically into libtorch_cpu.so. Two Glooes in one process (torch's and
# Debian's libgloo.so) would interpose each other's symbols (same mangled names, different
# versions and layouts), so when torch exports its Gloo we build against it, with the headers
# its wheel ships. The bundle's Debian libgloo is the fallback (Debian's own LibTorch links that
# same shared libgloo, so there it is the only copy).
TORCH_GLOO_HEADERS=0
TORCH_GLOO_SYMBOLS=0
[ -f "$TORCH_ROOT/include/gloo/config.h" ] && TORCH_GLOO_HEADERS=1
if [ -n "$TORCH_CPU_LIB" ] && command -v nm >/dev/null; then
  n=$(nm -D --defined-only "$TORCH_CPU_LIB" 2>/dev/null | grep -c ' T _ZN4gloo' || true)
  [ "${n:-0}" -gt 50 ] && TORCH_GLOO_SYMBOLS=1
elif [ -n "$TORCH_CPU_LIB" ]; then
  # No binutils: ask the dynamic loader where gloo::allreduce resolves (libtorch_cpu itself,
  # not a libgloo it depends on).
  timeout 30 python3 - "$TORCH_CPU_LIB" 2>/dev/null <<'PY' && TORCH_GLOO_SYMBOLS=1
import ctypes, sys
name = "_ZN4gloo9allreduceERKNS_16AllreduceOptionsE"
lib = ctypes.CDLL(sys.argv[1])
if not hasattr(lib, name):
    sys.exit(1)
class Info(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]
info = Info()
ctypes.CDLL(None).dladdr(ctypes.cast(getattr(lib, name), ctypes.c_void_p), ctypes.byref(info))
sys.exit(0 if b"libtorch_cpu" in (info.fname or b"") else 1)
PY
fi
GLOO_MODE=${ZERO_GLOO:-auto}
if [ "$GLOO_MODE" = auto ]; then
  GLOO_MODE=bundle
  [ "$TORCH_GLOO_HEADERS$TORCH_GLOO_SYMBOLS" = 11 ] && GLOO_MODE=torch
fi
GLOO_NOTE="torch ships gloo headers: $TORCH_GLOO_HEADERS, libtorch_cpu exports gloo: $TORCH_GLOO_SYMBOLS"
if [ "$GLOO_MODE" = bundle ] && [ "$TORCH_GLOO_SYMBOLS" = 1 ]; then
  GLOO_NOTE="$GLOO_NOTE; WARNING: two Gloo copies in one process (symbol interposition risk)"
fi

gloo_args() {  # prints the configure arguments for Gloo mode $1
  if [ "$1" = torch ]; then
    mkdir -p "$WORK/torch_gloo"
    cat >"$WORK/torch_gloo/GlooConfig.cmake" <<EOF
# Written by scripts/gpu_check.sh: the Gloo compiled into $TORCH_CPU_LIB, with the headers
# the torch wheel ships (include/gloo/config.h says how it was built).
if(NOT TARGET gloo)
  add_library(gloo INTERFACE IMPORTED)
  set_target_properties(gloo PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "$TORCH_ROOT/include"
    INTERFACE_LINK_LIBRARIES "$TORCH_CPU_LIB")
endif()
set(Gloo_FOUND TRUE)
EOF
    echo "-DGloo_DIR=$WORK/torch_gloo"
    echo "-DCMAKE_EXE_LINKER_FLAGS="
  else
    # The bundle's GlooConfig makes its include folder a plain -I, searched before torch's
    # -isystem folders, which may hold another include/gloo.
    echo "-DGloo_DIR=$BUNDLE/gloo/share/cmake/Gloo"
    # torch exports its own Gloo too: make Debian's libgloo the first DT_NEEDED, so every gloo
    # symbol binds to the copy our headers describe (torch's Gloo code is never called by us).
    if [ "$TORCH_GLOO_SYMBOLS" = 1 ]; then
      echo "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed,$BUNDLE/gloo/lib/libgloo.so.0,--as-needed"
    else
      echo "-DCMAKE_EXE_LINKER_FLAGS="
    fi
  fi
}

# ---------------------------------------------------------------- NCCL: the one torch uses
NCCL_ARGS=()
if [ -e "$TORCH_ROOT/lib/libtorch_cuda.so" ]; then
  nccl_lib=$(ldd "$TORCH_ROOT/lib/libtorch_cuda.so" 2>/dev/null | awk '/libnccl/ {print $3; exit}')
  nccl_inc=""
  if [ -n "$nccl_lib" ] && [ -f "$(dirname "$nccl_lib")/../include/nccl.h" ]; then
    nccl_inc=$(cd "$(dirname "$nccl_lib")/../include" && pwd)
  fi
  if [ -z "$nccl_inc" ]; then  # the pip package nvidia-nccl-cu13 (or -cu12), wherever it lives
    h=$(wheel_lib nccl.h)
    [ -n "$h" ] && nccl_inc=$(dirname "$h")
    [ -z "$nccl_lib" ] && [ -n "$nccl_inc" ] && nccl_lib=$(find "$nccl_inc/../lib" -name 'libnccl.so*' 2>/dev/null | sort | head -1)
  fi
  if [ -z "$nccl_inc" ] && [ -n "${NCCL_HOME:-}" ]; then nccl_inc="$NCCL_HOME/include"; fi
  if [ -n "$nccl_lib" ] && [ -n "$nccl_inc" ]; then
    NCCL_ARGS=(-DZERO_NCCL_INCLUDE_DIR="$nccl_inc" -DZERO_NCCL_LIBRARY="$nccl_lib")
    export NCCL_HOME=${NCCL_HOME:-$(dirname "$nccl_inc")}
    result probe nccl info "$nccl_lib"
  else
    result probe nccl "$([ "$GPU_EXPECTED" = 1 ] && echo failed || echo info)" \
      "torch's NCCL not found (lib '${nccl_lib}', include '${nccl_inc}'); set NCCL_HOME"
  fi
fi
# torch's CMake config ignores CMAKE_CUDA_ARCHITECTURES and adds -gencode flags of its own for
# TORCH_CUDA_ARCH_LIST (detected from the GPU when unset): make them the same architectures.
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$(echo "$CUDA_ARCHS" | tr ';' '\n' | sed -E 's/-(real|virtual)$//; s/^([0-9]+)([0-9])$/\1.\2/' | paste -sd';')
fi
export TORCH_CUDA_ARCH_LIST
say "LibTorch: $TORCH_PREFIX; GPU expected: $GPU_EXPECTED; Gloo: $GLOO_MODE ($GLOO_NOTE); budget $BUDGET s"
phase_end

# ================================================================ 2 configure + build (background)
. "$ROOT/scripts/gpu_check_build.sh"

if command -v cmake >/dev/null && command -v ninja >/dev/null; then
  build_chain 2>"$WORK/chain.err" &
  CHAIN_PID=$!
else
  echo 1 >"$WORK/configure.state"
fi

# Waits until the background step's state file exists; prints its exit code (124: gave up).
wait_state() {  # NAME SECONDS
  local end=$(($(date +%s) + $2))
  while [ ! -f "$WORK/$1.state" ]; do
    if [ "$(date +%s)" -ge $end ]; then echo 124; return; fi
    if [ -n "$CHAIN_PID" ] && ! kill -0 "$CHAIN_PID" 2>/dev/null; then
      [ -f "$WORK/$1.state" ] && break
      echo 1
      return
    fi
    sleep 1 & wait $!
  done
  cat "$WORK/$1.state"
}

# ================================================================ 1 kernels, nvcc alone
phase_start kernels 150
KDIR="$WORK/kernels"
if [ -z "$NVCC" ]; then
  result kernels nvcc-build "$([ "$GPU_EXPECTED" = 1 ] && echo failed || echo skipped)" "no nvcc"
else
  mkdir -p "$KDIR/obj"
  gencode=()
  for a in ${CUDA_ARCHS//;/ }; do
    n=${a%%-*}
    case $a in
      *-real) gencode+=(-gencode "arch=compute_$n,code=sm_$n") ;;
      *-virtual) gencode+=(-gencode "arch=compute_$n,code=compute_$n") ;;
      *) gencode+=(-gencode "arch=compute_$n,code=[sm_$n,compute_$n]") ;;
    esac
  done
  # What kernels/CMakeLists.txt and tests/kernels/CMakeLists.txt build for kernels_cuda_test,
  # with the bundle's Catch2; kernels/cpu is the test's CPU reference.
  kflags=(-std=c++17 -O2 "${gencode[@]}" -DZERO_HAS_CUDA=1 -I"$ROOT/include" -I"$ROOT/tests"
    -I"$ROOT/tests/kernels" -I"$ROOT/tools" -I"$BUNDLE/include")
  srcs=(kernels/cuda/adam.cu kernels/cuda/math.cu kernels/cuda/quantize.cu kernels/cpu/reference.cpp
    kernels/cpu/simd_kernels.cpp kernels/cpu/parallel.cpp kernels/cpu/dispatch.cpp kernels/cpu/quantize.cpp
    tests/kernels/cuda_kernels_test.cpp tests/catch_main.cpp
    benchmarks/kernels/cuda_adam_bench.cpp)
  t=$(date +%s)
  : >"$KDIR/build.log"
  secs=$(limit 90)
  running() { local p n=0; for p in "${BG_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done; echo $n; }
  for src in "${srcs[@]}"; do
    while [ "$(running)" -ge "$JOBS" ]; do sleep 0.2 & wait $!; done
    extra=()
    [ "$src" = kernels/cpu/simd_kernels.cpp ] && extra=(-Xcompiler -fno-math-errno)
    obj="$KDIR/obj/$(echo "$src" | tr / _).o"
    (timeout -k 5 "$secs" "$NVCC" "${kflags[@]}" "${extra[@]}" -c "$ROOT/$src" -o "$obj" >"$obj.log" 2>&1
      echo $? >"$obj.rc") &
    BG_PIDS+=($!)
  done
  for p in "${BG_PIDS[@]}"; do wait "$p"; done
  BG_PIDS=()
  bad=""
  for src in "${srcs[@]}"; do
    obj="$KDIR/obj/$(echo "$src" | tr / _).o"
    cat "$obj.log" >>"$KDIR/build.log"
    [ "$(cat "$obj.rc" 2>/dev/null)" = 0 ] || bad="$bad $src"
  done
  kobj=("$KDIR"/obj/kernels_*.o)
  if [ -z "$bad" ]; then
    run_limited "$(limit 30)" "$KDIR/build.log" "$NVCC" "${gencode[@]}" -o "$KDIR/kernels_cuda_test" "${kobj[@]}" \
      "$KDIR/obj/tests_kernels_cuda_kernels_test.cpp.o" "$KDIR/obj/tests_catch_main.cpp.o" -lpthread &&
      run_limited "$(limit 30)" "$KDIR/build.log" "$NVCC" "${gencode[@]}" -o "$KDIR/cuda_adam_bench" "${kobj[@]}" \
        "$KDIR/obj/benchmarks_kernels_cuda_adam_bench.cpp.o" -lpthread || bad=" (link)"
  fi
  if [ -n "$bad" ]; then
    result kernels nvcc-build failed "failed:$bad: $(grep -m1 -E 'error' "$KDIR/build.log" | cut -c1-150)"
  else
    result kernels nvcc-build passed "kernels_cuda_test + cuda_adam_bench, ${CUDA_ARCHS}, $(($(date +%s) - t)) s"
    run_limited "$(limit 45)" "$KDIR/test.log" "$KDIR/kernels_cuda_test"
    rc=$?
    gpu_result kernels kernels_cuda_test $rc "$(last_line "$KDIR/test.log")"
    if [ $rc -eq 0 ]; then
      if [ -n "$SANITIZER" ]; then
        # memcheck on every case; racecheck on the sum of squares (the one kernel with shared
        # memory and a second stage).
        run_limited "$(limit 90)" "$KDIR/memcheck.log" "$SANITIZER" --tool memcheck --error-exitcode 99 \
          --leak-check full "$KDIR/kernels_cuda_test"
        rc=$?
        gpu_result kernels memcheck $rc "$(grep -m1 -E 'ERROR SUMMARY|Error' "$KDIR/memcheck.log" | cut -c1-150)"
        run_limited "$(limit 45)" "$KDIR/racecheck.log" "$SANITIZER" --tool racecheck --error-exitcode 99 \
          "$KDIR/kernels_cuda_test" "[math]"
        rc=$?
        gpu_result kernels racecheck $rc "$(grep -m1 -E 'RACECHECK SUMMARY|ERROR SUMMARY|Error' "$KDIR/racecheck.log" | cut -c1-150)"
      else
        result kernels compute-sanitizer info "not found: memcheck and racecheck not run"
      fi
    fi
    # shellcheck disable=SC2086
    run_limited "$(limit 45)" "$KDIR/bench.log" "$KDIR/cuda_adam_bench" --json ${BENCH_ARGS:-}
    rc=$?
    if [ $rc -eq 0 ]; then
      python3 - "$KDIR/bench.log" >"$KDIR/bench.rows" <<'PY'
import json, sys
d = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
c = d["copy"]
print(f"D2D copy ({d['device']})\tinfo\t{c['gbps']:.0f} GB/s (read+write of {c['bytes']/2**30:.2f} GiB)")
for r in d["cases"]:
    print(f"{r['case']} {r['variant']}\tpassed\t{r['gbps']:.0f} GB/s, {r['elems_per_s']:.3e} el/s, "
          f"{r['pct_of_copy']:.1f}% of copy ({r['bytes_per_elem']} B/el, {r['launches']} launches, {r['ms']:.3f} ms)")
PY
      while IFS=$'\t' read -r name status detail; do result kernels "$name" "$status" "$detail"; done <"$KDIR/bench.rows"
    else
      gpu_result kernels cuda_adam_bench $rc "exit $rc: $(last_line "$KDIR/bench.log")"
    fi
  fi
fi
phase_end

# ================================================================ 2 wait for the configure
phase_start configure-wait 150
rc=$(wait_state configure "$(limit 150)")
[ "$rc" = 124 ] && result build configure timeout "not done after $(elapsed) s (log: configure.log)"
phase_end
if [ "${STOP_AFTER_CONFIGURE:-0}" = 1 ]; then
  result setup stop info "STOP_AFTER_CONFIGURE=1: nothing built by CMake, phases 3-5 not run"
  exit 0
fi

runtime_env() {  # once the build chain has settled the Gloo mode
  # In bundle mode the Debian libgloo and its libraries must be found at run time (only then:
  # the bundle's libibverbs would otherwise shadow the machine's for NCCL).
  if [ "$(cat "$WORK/gloo_mode" 2>/dev/null)" = bundle ]; then
    case ":${LD_LIBRARY_PATH:-}:" in *":$BUNDLE/gloo/lib:"*) ;;
      *) export LD_LIBRARY_PATH="$BUNDLE/gloo/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
  fi
}
exe() { find "$BUILD" -type f -name "$1" -perm -u+x 2>/dev/null | head -1; }
run_test() {  # SECTION TARGET SECONDS
  local bin log=$WORK/$2.log
  bin=$(exe "$2")
  if [ -z "$bin" ]; then
    result "$1" "$2" "$([ "$GPU_EXPECTED" = 1 ] && echo failed || echo skipped)" "not built (ZERO_HAS_CUDA or ZERO_HAS_NCCL off?)"
    return
  fi
  local t here=$PWD
  t=$(date +%s)
  cd "$(dirname "$bin")" || return
  run_limited "$3" "$log" "$bin"
  local rc=$?
  cd "$here" || return
  local summary
  summary=$(grep -E 'test cases|assertions' "$log" | tail -1)
  gpu_result "$1" "$2" $rc "exit $rc, $(($(date +%s) - t)) s: ${summary:-$(last_line "$log")}"
}

# ================================================================ 3 NCCL
phase_start nccl 45
rc=$(wait_state nccl_build "$((T0 + BUDGET - $(date +%s) - 200))")
PHASE_END=$(($(date +%s) + 45))
runtime_env
case $rc in
  0) run_test nccl comm_nccl_test "$(limit 45)" ;;
  77) result nccl comm_nccl_test "$([ "$GPU_EXPECTED" = 1 ] && echo failed || echo skipped)" "no such target (ZERO_HAS_NCCL off)" ;;
  124) result nccl comm_nccl_test timeout "the build did not get it done within the budget" ;;
  *) result nccl comm_nccl_test failed "not built (build.log, configure.log)" ;;
esac
phase_end

# ================================================================ 4 engine on CUDA
phase_start engine 150
rc=$(wait_state build "$((T0 + BUDGET - $(date +%s) - 170))")
PHASE_END=$(($(date +%s) + 150))
runtime_env
BUILT=$rc
case $rc in
  0) run_test engine engine_cuda_test "$(limit 150)" ;;
  124) result engine engine_cuda_test timeout "the build did not get it done within the budget" ;;
  *) result engine engine_cuda_test failed "not built (build.log)" ;;
esac
phase_end

# ================================================================ 5 example GPT, one process
phase_start gpt 120
if [ "$GPU_EXPECTED" = 1 ]; then
  DEVICE=cuda
  DTYPES="fp32 bf16 fp16"
elif [ "${GPT_CPU:-bf16}" != skip ]; then
  DEVICE=cpu
  DTYPES=${GPT_CPU:-bf16}
else
  DEVICE=none
fi
GPT=$(exe gpt_train)
if [ "$DEVICE" = none ]; then
  result gpt "stages $GPT_STAGES" skipped "no GPU (GPT_CPU=skip)"
elif [ "$BUILT" != 0 ] || [ -z "$GPT" ]; then
  result gpt gpt_train failed "not built"
else
  for dtype in $DTYPES; do
    for stage in $GPT_STAGES; do
      name="stage$stage $dtype ($DEVICE)"
      cfg="$WORK/ds_stage${stage}_$dtype.json"
      # The shipped stage config plus the precision section (fp16: dynamic loss scaling).
      python3 - "$ROOT/examples/gpt/ds_config_stage$stage.json" "$dtype" "$cfg" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
for k in ("bf16", "fp16"):
    c.pop(k, None)
if sys.argv[2] == "bf16":
    c["bf16"] = {"enabled": True}
elif sys.argv[2] == "fp16":
    c["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
json.dump(c, open(sys.argv[3], "w"), indent=1)
PY
      log="$WORK/gpt_stage${stage}_$dtype.log"
      secs=$(limit 45)
      run_limited "$secs" "$log" env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE \
        "$GPT" --deepspeed_config "$cfg" --steps "$GPT_STEPS" --device "$DEVICE" --json_summary
      rc=$?
      line=$(grep -E '^\{.*"final_loss"' "$log" | tail -1)
      if [ $rc -eq 0 ] && [ -n "$line" ]; then
        # Falling by 10 % in 20 steps: a model whose weights never change only wanders.
        detail=$(python3 -c '
import json, math, sys
d = json.loads(sys.argv[1])
ok = math.isfinite(d["final_loss"]) and d["final_loss"] <= 0.9 * d["first_loss"]
print("ok" if ok else "bad",
      "loss %.4f -> %.4f (%.0f %%) after %d steps, %.2f ms/step, peak %.1f MiB (%s)" % (d["first_loss"],
      d["final_loss"], 100 * (d["final_loss"] / d["first_loss"] - 1), d["steps"], d["ms_per_step"],
      d["peak_memory_bytes"] / 2**20, d["memory_source"]))
' "$line")
        if [ "${detail%% *}" = ok ]; then
          result gpt "$name" passed "${detail#* }"
        else
          result gpt "$name" failed "loss non-finite or fell by less than 10 %: ${detail#* }"
        fi
      elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        result gpt "$name" timeout "after $secs s"
      else
        result gpt "$name" failed "exit $rc: $(last_line "$log")"
      fi
    done
  done
fi
phase_end
exit 0
