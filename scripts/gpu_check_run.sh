# gpu_check.sh's run control, sourced by it: result rows (live in results.tsv and
# $GPU_CHECK_OUT), phases and their budgets, commands under a time limit, the cleanup of every
# process the run started, and finish(), which prints the table even after a kill.
# Uses the variables gpu_check.sh sets before sourcing it (T0, WORK, RESULTS, OUT, ...).

say() { echo "gpu_check: $*" >&2; }
elapsed() { echo $(($(date +%s) - T0)); }
result() {  # SECTION NAME STATUS DETAIL: recorded at once, also in $GPU_CHECK_OUT
  local line
  line=$(printf '%s\t%s\t%s\t%s' "$1" "$2" "$3" "$4" | tr -d '\r' | head -c 600)
  printf '%s\n' "$line" >>"$RESULTS"
  [ -n "$OUT" ] && printf '%s\n' "$line" >>"$OUT/results.tsv"
  printf 'gpu_check: [%s] %-30s %-8s %s\n' "$1" "$2" "$3" "$4" >&2
}
# The status of a check from its exit code: 77 is "skipped", which on a GPU machine is a
# failure; 124/137 come from `timeout`.
gpu_result() {  # SECTION NAME RC DETAIL
  local status
  case $3 in
    0) status=passed ;;
    77) if [ "$GPU_EXPECTED" = 1 ]; then status="FAILED(skipped on a GPU machine)"; else status=skipped; fi ;;
    124 | 137) status=timeout ;;
    *) status=failed ;;
  esac
  result "$1" "$2" "$status" "$4"
}
phase_start() { PHASE=$1 PHASE_T=$(date +%s) PHASE_END=$(($(date +%s) + $2)); say "== $1 (budget $2 s, $(elapsed) s so far)"; }
phase_end() { result time "$PHASE" info "$(($(date +%s) - PHASE_T)) s"; }
# Seconds a step may take: its own cap, cut to what is left of the phase and of the run.
limit() {
  local now n
  now=$(date +%s)
  n=$1
  [ $((PHASE_END - now)) -lt "$n" ] && n=$((PHASE_END - now))
  [ $((T0 + BUDGET - now)) -lt "$n" ] && n=$((T0 + BUDGET - now))
  [ "$n" -lt 0 ] && n=0
  echo "$n"
}
# Runs a command under `timeout` in the background and waits, so a TERM reaches the trap at
# once instead of after the command. Output appended to LOG.
run_limited() {  # SECONDS LOG COMMAND...
  local secs=$1 log=$2
  shift 2
  if [ "$secs" -lt 1 ]; then echo "no time left in the budget" >>"$log"; return 124; fi
  timeout -k 5 "$secs" "$@" >>"$log" 2>&1 &
  CHILD=$!
  wait "$CHILD"
  local rc=$?
  CHILD=""
  return $rc
}
# Every process this run started carries GPU_CHECK_RUN in its environment, also those whose
# parent a TERM to the whole process group has already ended (`timeout` leads a group of its
# own, so its command would outlive the run).
export GPU_CHECK_RUN="$$.$T0"
kill_ours() {  # SIGNAL
  local d p
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = $$ ] && continue
    { tr '\0' '\n' <"$d/environ"; } 2>/dev/null | grep -qx "GPU_CHECK_RUN=$GPU_CHECK_RUN" &&
      kill "-$1" "$p" 2>/dev/null
  done
}
last_line() { grep -v -E '^(frame #|\s*$)' "$1" 2>/dev/null | tail -1 | cut -c1-200; }
die() { result setup fatal failed "$*"; exit 1; }

finish() {
  [ -n "$FINISHING" ] && return
  FINISHING=1
  # Ignored, not reset: `timeout` relays a TERM twice (to this shell, then to its whole process
  # group); on a loaded machine the second can land after the first started finish(), and a
  # default TERM here would end the run without its summary.
  trap '' TERM INT
  trap - EXIT
  local p alive=""
  for p in $CHILD $CHAIN_PID "${BG_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  if [ -n "$KILLED$alive" ]; then
    kill_ours TERM
    sleep 1
    kill_ours KILL
  fi
  [ -n "$KILLED" ] && result setup gpu_check failed "killed by SIG$KILLED after $(elapsed) s: the other rows are all it got to"
  result time total info "$(elapsed) s"
  python3 - "$RESULTS" "$WORK/summary.json" <<'PY' | tee "$WORK/summary.txt"
import json, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
titles = {"setup": "setup", "probe": "0 probe: the machine, toolkit and torch's own CUDA/NCCL",
          "kernels": "1 kernels built by nvcc alone", "build": "2 configure and build",
          "nccl": "3 NCCL", "engine": "4 engine on CUDA vs CPU",
          "gpt": "5 example GPT, one process (loss must fall >= 10 %)", "time": "phases"}
out = {}
print("=" * 100)
for sec in titles:
    part = [r + [""] * (4 - len(r)) for r in rows if r[0] == sec]
    if not part:
        continue
    print(titles[sec])
    for _, name, status, detail in (p[:4] for p in part):
        print(f"  {name:<34} {status:<8} {detail}")
        out.setdefault(sec, []).append({"name": name, "status": status, "detail": detail})
print("=" * 100)
json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
  local failed=0
  awk -F'\t' 'tolower($3) ~ /fail|timeout/ {bad = 1} END {exit !bad}' "$RESULTS" && failed=1
  if [ -n "$OUT" ]; then
    cp "$WORK"/summary.txt "$WORK"/summary.json "$OUT"/ 2>/dev/null
    (cd "$WORK" && find . -maxdepth 2 -type f \( -name '*.log' -o -name '*.tsv' -o -name '*.json' \
      -o -name '*.txt' -o -name '*.xml' \) -print0 | tar -czf "$OUT/gpu_check_logs.tar.gz" --null -T -) 2>/dev/null
  fi
  if [ "$failed" -ne 0 ]; then say "FAILED (see $WORK)"; exit 1; fi
  say "all checks passed"
  exit 0
}
