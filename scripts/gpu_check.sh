#!/usr/bin/env bash
# gpu_check.sh: on a CUDA machine without internet or Debian -dev packages, builds the project
# against the installed PyTorch's LibTorch plus the carried bundle (.gpu_deps/, made here by
# scripts/gpu_deps.sh), runs every ctest labelled `gpu`, the fused-Adam bandwidth benchmark and
# single-GPU runs of the example GPT (stages 0-3 x bf16/fp16), and prints one summary table.
# Exits non-zero when the build, any test or any run failed (on a GPU machine, also when a GPU
# check was skipped). See docs/gpu.md.
#
# Settings (environment):
#   TORCH_CMAKE_PREFIX  LibTorch's CMake prefix; default: python3's torch.utils.cmake_prefix_path.
#                       /usr = Debian's CPU LibTorch (GPU parts then report "skipped").
#   GPU_DEPS            the bundle (default <repo>/.gpu_deps)
#   BUILD_DIR           build folder (default <repo>/build-gpu-check; reused when present)
#   ZERO_GLOO           auto | torch | bundle: which Gloo zero_comm builds against (default auto:
#                       torch's embedded Gloo when its wheel ships the headers and exports the
#                       symbols, else the bundle's Debian libgloo)
#   CUDA_ARCHS          CMAKE_CUDA_ARCHITECTURES (default 90: H100/H200)
#   JOBS                build jobs (default nproc)
#   GPT_STEPS           optimizer steps per GPT run (default 40 on CUDA, 4 on CPU)
#   GPT_CPU             bf16 | skip: without a GPU, run the GPT stages in bf16 on the CPU (default)
#   BENCH_ARGS          extra arguments for cuda_adam_bench (e.g. "--iters 10")
#   FULL_BUILD=1        build every target, not only what the checks run
#   EXTRA_CMAKE_ARGS    appended to the configure command
#   GPU_CHECK_OUT       a folder that receives summary.txt, summary.json and the logs
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
T0=$(date +%s)
BUNDLE=${GPU_DEPS:-$ROOT/.gpu_deps}
BUILD=${BUILD_DIR:-$ROOT/build-gpu-check}
JOBS=${JOBS:-$(nproc)}
CUDA_ARCHS=${CUDA_ARCHS:-90}
WORK="$BUILD/gpu_check"
mkdir -p "$WORK"
RESULTS="$WORK/results.tsv"  # section \t name \t status \t detail  (one line per check)
: >"$RESULTS"
FAILED=0

say() { echo "gpu_check: $*" >&2; }
result() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RESULTS"; }
phase_start() { PHASE_T=$(date +%s); say "== $1"; }
phase_end() { say "   $1 took $(($(date +%s) - PHASE_T)) s"; result time "$1" info "$(($(date +%s) - PHASE_T)) s"; }
die() { say "FATAL: $*"; result setup fatal failed "$*"; FAILED=1; finish; }

finish() {
  result time total info "$(($(date +%s) - T0)) s"
  python3 - "$RESULTS" "$WORK/summary.json" <<'PY' | tee "$WORK/summary.txt"
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
titles = {"setup": "setup", "test": "(a) ctest -L gpu", "bench": "(b) fused Adam vs D2D copy",
          "gpt": "(c) example GPT, one process (cuda: 1 GPU; cpu: bf16 stand-in)", "time": "phases"}
out = {}
print("=" * 100)
for sec in ["setup", "test", "bench", "gpt", "time"]:
    part = [r for r in rows if r[0] == sec]
    if not part:
        continue
    print(titles[sec])
    for _, name, status, detail in part:
        print(f"  {name:<34} {status:<8} {detail}")
        out.setdefault(sec, []).append({"name": name, "status": status, "detail": detail})
print("=" * 100)
json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
  if [ -n "${GPU_CHECK_OUT:-}" ]; then
    mkdir -p "$GPU_CHECK_OUT"
    cp "$WORK"/summary.txt "$WORK"/summary.json "$GPU_CHECK_OUT"/ 2>/dev/null
    tar -czf "$GPU_CHECK_OUT/gpu_check_logs.tar.gz" -C "$WORK" . 2>/dev/null
  fi
  if [ "$FAILED" -ne 0 ]; then say "FAILED (see $WORK)"; exit 1; fi
  say "all checks passed"
  exit 0
}

# ---------------------------------------------------------------- environment and torch
phase_start environment
[ -d "$BUNDLE/include/nlohmann" ] || die "no bundle at $BUNDLE: run scripts/gpu_deps.sh on the dev machine and carry it"
command -v cmake >/dev/null || die "cmake not found"
command -v ninja >/dev/null || die "ninja not found"
command -v python3 >/dev/null || die "python3 not found"
if [ -n "${TORCH_CMAKE_PREFIX:-}" ]; then
  TORCH_PREFIX=$TORCH_CMAKE_PREFIX
else
  TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
    die "python3 cannot import torch (set TORCH_CMAKE_PREFIX)"
fi
# The python torch is only consulted when it is the LibTorch we build against.
TORCH_INFO="n/a (TORCH_CMAKE_PREFIX=$TORCH_PREFIX)"
GPU_EXPECTED=0
if [ -z "${TORCH_CMAKE_PREFIX:-}" ]; then
  TORCH_INFO=$(python3 - <<'PY' 2>&1
import torch
c = torch.cuda.is_available()
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}, "
      f"device: {torch.cuda.get_device_name(0) if c else 'none'}")
PY
  )
  python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && GPU_EXPECTED=1
fi
# A visible GPU makes skipped GPU checks failures, even if python's torch cannot use it.
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  GPU_EXPECTED=1
fi
say "LibTorch: $TORCH_PREFIX; $TORCH_INFO; GPU expected: $GPU_EXPECTED"
result setup libtorch info "$TORCH_INFO"
if [ "$GPU_EXPECTED" = 1 ] && command -v nvidia-smi >/dev/null; then
  result setup nvidia-smi info "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
fi
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] && result setup nvcc info "$("$NVCC" --version | tail -2 | head -1)"

# Torch's own folder (pip: <site-packages>/torch; Debian: /usr) and libtorch_cpu.so.
TORCH_ROOT=$(cd "$TORCH_PREFIX/../.." 2>/dev/null && pwd)
TORCH_CPU_LIB=""
for d in "$TORCH_ROOT/lib" /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib; do
  [ -e "$d/libtorch_cpu.so" ] && { TORCH_CPU_LIB="$d/libtorch_cpu.so"; break; }
done

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
  python3 - "$TORCH_CPU_LIB" 2>/dev/null <<'PY' && TORCH_GLOO_SYMBOLS=1
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
say "Gloo: $GLOO_MODE ($GLOO_NOTE)"

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
    site=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    for s in $site; do
      h=$(find "$s/nvidia" -name nccl.h -path '*include*' 2>/dev/null | head -1)
      [ -n "$h" ] && { nccl_inc=$(dirname "$h"); break; }
    done
    [ -z "$nccl_lib" ] && [ -n "$nccl_inc" ] && nccl_lib=$(find "$nccl_inc/../lib" -name 'libnccl.so*' 2>/dev/null | sort | head -1)
  fi
  if [ -z "$nccl_inc" ] && [ -n "${NCCL_HOME:-}" ]; then nccl_inc="$NCCL_HOME/include"; fi
  if [ -n "$nccl_lib" ] && [ -n "$nccl_inc" ]; then
    NCCL_ARGS=(-DZERO_NCCL_INCLUDE_DIR="$nccl_inc" -DZERO_NCCL_LIBRARY="$nccl_lib")
    export NCCL_HOME=${NCCL_HOME:-$(dirname "$nccl_inc")}
    result setup nccl info "$nccl_lib"
  else
    result setup nccl failed "torch's NCCL not found (lib '${nccl_lib}', include '${nccl_inc}'); set NCCL_HOME"
    [ "$GPU_EXPECTED" = 1 ] && FAILED=1
  fi
fi
phase_end environment

# ---------------------------------------------------------------- configure
configure() {  # $1: gloo mode
  local prefix="$TORCH_PREFIX;$BUNDLE"
  # The system's copies of the bundled packages are hidden, so the configure proves the bundle
  # is complete (harmless where they do not exist).
  # (Debian's /lib is /usr/lib: both spellings are searched, both are listed.)
  local ignore="" d
  for d in share/cmake/nlohmann_json lib/x86_64-linux-gnu/cmake/spdlog lib/cmake/Catch2 \
    share/cmake/Gloo lib/cmake/Gloo; do ignore="$ignore;/usr/$d;/$d"; done
  ignore=${ignore#;}
  local args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_PREFIX_PATH=$prefix" "-DCMAKE_IGNORE_PATH=$ignore"
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5
    -DZERO_BUILD_TESTS=ON -DZERO_BUILD_EXAMPLES=ON -DZERO_BUILD_BENCHMARKS=ON -DZERO_INSTALL=OFF
    "${NCCL_ARGS[@]}")
  mapfile -t -O "${#args[@]}" args < <(gloo_args "$1")
  [ "$GPU_EXPECTED" = 1 ] && args+=(-DZERO_WITH_CUDA=ON -DZERO_WITH_NCCL=ON)
  # shellcheck disable=SC2206
  [ -n "${EXTRA_CMAKE_ARGS:-}" ] && args+=($EXTRA_CMAKE_ARGS)
  say "cmake ${args[*]}"
  cmake "${args[@]}" >"$WORK/configure.log" 2>&1
}
phase_start configure
if ! configure "$GLOO_MODE"; then
  tail -40 "$WORK/configure.log" >&2
  die "configure failed (log: $WORK/configure.log)"
fi
grep -E '^-- zero:' "$WORK/configure.log" | tail -1 | sed 's/^-- //' >&2
cfg_line=$(grep -E '^-- zero:' "$WORK/configure.log" | tail -1)
result setup configure passed "${cfg_line#-- zero: }"
phase_end configure

# ---------------------------------------------------------------- build
# Only what the checks run: every build-tree path a `gpu` test's command names that ninja
# knows as a target, the benchmark and gpt_train (FULL_BUILD=1: everything).
targets_for_checks() {
  # ctest --show-only omits commands whose executable does not exist yet: read CTestTestfiles.
  find "$BUILD" -name CTestTestfile.cmake -print0 | xargs -0 cat | python3 -c '
import re, sys
text = sys.stdin.read()
labels = {m.group(1): m.group(2).split(";") for m in re.finditer(
    r"set_tests_properties\(\[=\[(.+?)\]=\] PROPERTIES .*?LABELS \"([^\"]*)\"", text)}
for m in re.finditer(r"add_test\(\[=\[(.+?)\]=\] (.*)\)\s*$", text, re.M):
    if "gpu" in labels.get(m.group(1), []):
        for tok in re.findall(r"\"([^\"]*)\"", m.group(2)):
            print(tok)' | while read -r tok; do
    case "$tok" in "$BUILD"/*) rel=${tok#"$BUILD"/} ;; *) continue ;; esac
    ninja -C "$BUILD" -t query "$rel" >/dev/null 2>&1 && echo "$rel"
  done
  for t in bin/cuda_adam_bench bin/gpt_train; do
    ninja -C "$BUILD" -t query "$t" >/dev/null 2>&1 && echo "$t"
  done
}
build() {  # $@: targets (none: all)
  ninja -C "$BUILD" -j"$JOBS" "$@" >>"$WORK/build.log" 2>&1
}
phase_start build
: >"$WORK/build.log"
if [ "$GLOO_MODE" = torch ] && [ "${ZERO_GLOO:-auto}" = auto ]; then
  # Probe: zero_comm and one executable that links it, against torch's Gloo. If our Gloo code
  # does not compile or link against torch's (newer) Gloo, fall back to the bundle's.
  probe=(zero_comm)
  ninja -C "$BUILD" -t query comm_worker >/dev/null 2>&1 && probe+=(comm_worker)
  if ! build "${probe[@]}"; then
    say "zero_comm does not build against torch's Gloo; falling back to the bundle's Debian Gloo"
    grep -m5 -E 'error|undefined reference' "$WORK/build.log" >&2
    GLOO_MODE=bundle
    GLOO_NOTE="$GLOO_NOTE; torch's Gloo failed to build (see build.log): FELL BACK to the bundle, interposition risk"
    configure bundle || die "reconfigure with the bundle's Gloo failed (log: $WORK/configure.log)"
  fi
fi
result setup gloo info "$GLOO_MODE ($GLOO_NOTE)"
# Where each dependency came from: the bundle (or torch), never the system.
for v in nlohmann_json_DIR spdlog_DIR Catch2_DIR Gloo_DIR Torch_DIR ZERO_NCCL_LIBRARY; do
  val=$(sed -n "s/^$v:[A-Z]*=//p" "$BUILD/CMakeCache.txt" | head -1)
  result setup "$v" info "${val:-unset}"
done
if [ "${FULL_BUILD:-0}" = 1 ]; then
  mapfile -t TARGETS < <(echo all)
else
  mapfile -t TARGETS < <(targets_for_checks | sort -u)
fi
say "building ${TARGETS[*]:-nothing} with -j$JOBS"
if [ "${#TARGETS[@]}" -gt 0 ] && ! build "${TARGETS[@]}"; then
  grep -E -m20 'error|FAILED' "$WORK/build.log" >&2
  die "build failed (log: $WORK/build.log)"
fi
result setup build passed "${#TARGETS[@]} targets, -j$JOBS"
# In bundle mode the Debian libgloo and its libraries must be found at run time (only then:
# the bundle's libibverbs would otherwise shadow the machine's for NCCL).
if [ "$GLOO_MODE" = bundle ]; then
  export LD_LIBRARY_PATH="$BUNDLE/gloo/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# Headers really came from the bundle (or torch): none of the bundled packages from /usr/include.
leaks=$(ninja -C "$BUILD" -t deps 2>/dev/null | grep -oE '/usr/(local/)?include/(nlohmann|spdlog|catch2|gloo)/[^ ]*' | sort -u | head -5)
if [ -n "$leaks" ]; then
  result setup header-provenance failed "system headers used: $(echo "$leaks" | tr '\n' ' ')"
  FAILED=1
else
  result setup header-provenance passed "no nlohmann/spdlog/catch2/gloo header from /usr/include"
fi
phase_end build

# ---------------------------------------------------------------- (a) GPU tests
phase_start "ctest -L gpu"
ctest --test-dir "$BUILD" -L gpu --output-on-failure --output-junit "$WORK/ctest_gpu.xml" \
  >"$WORK/ctest_gpu.log" 2>&1
tail -5 "$WORK/ctest_gpu.log" >&2
if [ -f "$WORK/ctest_gpu.xml" ]; then
  python3 - "$WORK/ctest_gpu.xml" "$GPU_EXPECTED" >>"$RESULTS" <<'PY'
import sys, xml.etree.ElementTree as ET
gpu = sys.argv[2] == "1"
cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
n = 0
for c in cases:
    n += 1
    st = c.get("status", "")
    if c.find("failure") is not None or st == "fail":
        status = "failed"
    elif c.find("skipped") is not None or st in ("notrun", "disabled"):
        status = "FAILED(skipped on a GPU machine)" if gpu else "skipped"
    else:
        status = "passed"
    print(f"test\t{c.get('name')}\t{status}\t{float(c.get('time', 0)):.1f} s")
if n == 0:
    print("test\t(no test labelled gpu)\t" + ("failed" if gpu else "skipped") + "\tZERO_HAS_CUDA off?")
PY
else
  result test ctest failed "no junit output (log: $WORK/ctest_gpu.log)"
fi
awk -F'\t' '$1 == "test" && tolower($3) ~ /fail/ {bad = 1} END {exit !bad}' "$RESULTS" && FAILED=1
phase_end "ctest -L gpu"

# ---------------------------------------------------------------- (b) fused Adam bandwidth
phase_start "cuda_adam_bench"
if [ -x "$BUILD/bin/cuda_adam_bench" ]; then
  # shellcheck disable=SC2086
  "$BUILD/bin/cuda_adam_bench" --json ${BENCH_ARGS:-} >"$WORK/bench.json" 2>"$WORK/bench.err"
  rc=$?
  if [ $rc -eq 0 ]; then
    python3 - "$WORK/bench.json" >>"$RESULTS" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
c = d["copy"]
print(f"bench\tD2D copy ({d['device']})\tinfo\t{c['gbps']:.0f} GB/s (read+write of {c['bytes']/2**30:.2f} GiB)")
for r in d["cases"]:
    print(f"bench\t{r['case']} {r['variant']}\tpassed\t{r['gbps']:.0f} GB/s, {r['elems_per_s']:.3e} el/s, "
          f"{r['pct_of_copy']:.1f}% of copy ({r['bytes_per_elem']} B/el, {r['launches']} launches, {r['ms']:.3f} ms)")
PY
  elif [ $rc -eq 77 ] && [ "$GPU_EXPECTED" = 0 ]; then
    result bench cuda_adam_bench skipped "$(tail -1 "$WORK/bench.err")"
  else
    result bench cuda_adam_bench failed "exit $rc: $(tail -1 "$WORK/bench.err")"
    FAILED=1
  fi
else
  if [ "$GPU_EXPECTED" = 1 ]; then
    result bench cuda_adam_bench failed "not built (ZERO_HAS_CUDA off?)"
    FAILED=1
  else
    result bench cuda_adam_bench skipped "not built (no CUDA compiler)"
  fi
fi
phase_end "cuda_adam_bench"

# ---------------------------------------------------------------- (c) example GPT, one GPU
phase_start "gpt_train"
if [ "$GPU_EXPECTED" = 1 ]; then
  DEVICE=cuda
  DTYPES="bf16 fp16"
  STEPS=${GPT_STEPS:-40}
elif [ "${GPT_CPU:-bf16}" = bf16 ]; then
  DEVICE=cpu
  DTYPES="bf16"
  STEPS=${GPT_STEPS:-4}
else
  DEVICE=none
fi
if [ "$DEVICE" = none ]; then
  result gpt "stages 0-3" skipped "no GPU (GPT_CPU=skip)"
elif [ ! -x "$BUILD/bin/gpt_train" ]; then
  result gpt gpt_train failed "not built"
  FAILED=1
else
  for dtype in $DTYPES; do
    for stage in 0 1 2 3; do
      name="stage$stage $dtype ($DEVICE)"
      cfg="$WORK/ds_stage${stage}_$dtype.json"
      # The shipped stage config plus the precision section (fp16: dynamic loss scaling).
      python3 - "$ROOT/examples/gpt/ds_config_stage$stage.json" "$dtype" "$cfg" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["bf16" if sys.argv[2] == "bf16" else "fp16"] = (
    {"enabled": True} if sys.argv[2] == "bf16"
    else {"enabled": True, "loss_scale": 0, "initial_scale_power": 16})
json.dump(c, open(sys.argv[3], "w"), indent=1)
PY
      log="$WORK/gpt_stage${stage}_$dtype.log"
      env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE \
        timeout 300 "$BUILD/bin/gpt_train" --deepspeed_config "$cfg" --steps "$STEPS" \
        --device "$DEVICE" --json_summary >"$log" 2>&1
      rc=$?
      line=$(grep -E '^\{.*"final_loss"' "$log" | tail -1)
      if [ $rc -eq 0 ] && [ -n "$line" ]; then
        detail=$(python3 -c '
import json, math, sys
d = json.loads(sys.argv[1])
ok = math.isfinite(d["final_loss"]) and d["final_loss"] < d["first_loss"]
print("ok" if ok else "bad",
      "loss %.4f -> %.4f after %d steps, %.2f ms/step, peak %.1f MiB (%s)" % (d["first_loss"],
      d["final_loss"], d["steps"], d["ms_per_step"], d["peak_memory_bytes"] / 2**20,
      d["memory_source"]))
' "$line")
        if [ "${detail%% *}" = ok ]; then
          result gpt "$name" passed "${detail#* }"
        else
          result gpt "$name" failed "loss non-finite or not falling: ${detail#* }"
          FAILED=1
        fi
      else
        result gpt "$name" failed "exit $rc: $(grep -v '^frame #' "$log" | tail -1 | cut -c1-150)"
        FAILED=1
      fi
    done
  done
fi
phase_end "gpt_train"
finish
