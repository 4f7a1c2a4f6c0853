#!/usr/bin/env bash
# A real one-host Slurm cluster (slurmctld + slurmd, generated slurm.conf, state in a temp dir)
# and the example GPT run through it: slurm_cluster.sh REPO BIN_DIR. Exits 77 (skipped) with the
# reason when Slurm cannot start here. Ports: daemons 30290-30291, srun 30270-30289, jobs 30230-30239.
# Also zerorun --launcher slurm --max_restarts: a rank killed after a checkpoint, the job resumed.
set -uo pipefail
repo=$1; bin=$2
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; failed=1; }
failed=0

[ "$(id -u)" -eq 0 ] || skip "slurmd needs root (it starts job steps as their owner)"
for c in slurmctld slurmd sbatch srun scancel scontrol squeue; do
  command -v "$c" >/dev/null || skip "$c not installed (scripts/setup.sh installs slurm-wlm)"
done
for port in 30290 30291; do
  if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then skip "port $port is in use"; fi
done

dir=$(mktemp -d /tmp/zero-slurm.XXXXXX)
chmod 755 "$dir"
export SLURM_CONF=$dir/slurm.conf
stop_cluster() {
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
  done
  sleep 1
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null
  done
  rm -rf "$dir"
}
trap stop_cluster EXIT

# localhost: the node's name must resolve (MASTER_ADDR is the first host of the node list).
mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/jobs"
cat >"$SLURM_CONF" <<CONF
ClusterName=zerotest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=30290
SlurmdPort=30291
SrunPortRange=30270-30289
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
KillWait=5
MessageTimeout=20
NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF

slurmctld -i >"$dir/log/slurmctld.out" 2>&1 || skip "slurmctld did not start: $(tail -3 "$dir/log/slurmctld.log" "$dir/log/slurmctld.out" 2>/dev/null)"
slurmd -N localhost >"$dir/log/slurmd.out" 2>&1 || skip "slurmd did not start: $(tail -3 "$dir/log/slurmd.log" "$dir/log/slurmd.out" 2>/dev/null)"
up=0
for _ in $(seq 60); do
  if sinfo -h -o %t 2>/dev/null | grep -qx idle; then up=1; break; fi
  sleep 0.5
done
[ $up -eq 1 ] || skip "the node did not become idle: $(sinfo 2>&1 | tail -2); $(tail -3 "$dir/log/slurmd.log")"
echo "slurm: $(slurmctld -V) up, node localhost idle (state in $dir)"

train="$bin/gpt_train"
config="$repo/examples/gpt/ds_config_stage2.json"
tiny=(--steps 4 --n-layer 1 --d-model 32 --context 32)
export OMP_NUM_THREADS=1

# 1. zerorun --launcher slurm: zerorun runs srun, which makes its own allocation of 4 tasks.
out=$(cd "$repo" && timeout 180 "$bin/zerorun" --launcher slurm --num_gpus 4 --master_port 30230 \
  "$train" --deepspeed_config "$config" "${tiny[@]}" 2>&1)
rc=$?
echo "$out" | sed 's/^/[zerorun --launcher slurm] /'
[ $rc -eq 0 ] || fail "zerorun --launcher slurm exited $rc"
grep -q "ZeRO stage 2, 4 rank(s)" <<<"$out" || fail "zerorun --launcher slurm: not 4 ranks"
grep -q "gpt_train: done, 4 optimizer steps" <<<"$out" || fail "zerorun --launcher slurm: training did not finish"

# 2. The sbatch script of docs/launcher.md, as written, with CPU-sized arguments: srun starts
# gpt_train and the ranks come from SLURM_* alone.
sed -n '/<!-- sbatch script begin -->/,/<!-- sbatch script end -->/p' "$repo/docs/launcher.md" |
  sed '1,2d;$d' | sed '$d' >"$dir/jobs/docs.sbatch"
grep -q '^srun' "$dir/jobs/docs.sbatch" || fail "no sbatch script found in docs/launcher.md"
sed -i '/--gpus-per-node/d' "$dir/jobs/docs.sbatch"  # this test cluster has no GPUs (GRES)
(cd "$repo" && MASTER_PORT=30231 ZERO_BIN=$bin DEVICE=cpu timeout 180 sbatch --wait --nodes=1 \
  --ntasks-per-node=2 --cpus-per-task=1 --output="$dir/jobs/docs.out" "$dir/jobs/docs.sbatch" \
  "${tiny[@]}") >"$dir/jobs/docs.submit" 2>&1
rc=$?
sed 's/^/[docs sbatch] /' "$dir/jobs/docs.out" 2>/dev/null | grep -v '\] step=' | head -40
[ $rc -eq 0 ] || fail "sbatch --wait of the docs script exited $rc: $(cat "$dir/jobs/docs.submit")"
grep -q "ZeRO stage 2, 2 rank(s)" "$dir/jobs/docs.out" || fail "docs script: not 2 ranks from SLURM_*"
grep -q "gpt_train: done, 4 optimizer steps" "$dir/jobs/docs.out" || fail "docs script: training did not finish"

# 3. sbatch --wait of a multi-step job: srun trains and saves, then zerorun --launcher slurm
# resumes from the checkpoint on the same 3 tasks.
cat >"$dir/jobs/steps.sbatch" <<JOB
#!/bin/bash
#SBATCH --ntasks=3
#SBATCH --cpus-per-task=1
set -euo pipefail
export MASTER_PORT=30232 ZERO_JOB_TOKEN=\$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
srun --kill-on-bad-exit=1 $train --deepspeed_config $config --steps 3 --n-layer 1 --d-model 32 --context 32 --save_dir $dir/ckpt
$bin/zerorun --launcher slurm --master_port 30233 $train --deepspeed_config $config --steps 5 --n-layer 1 --d-model 32 --context 32 --save_dir $dir/ckpt
JOB
(cd "$repo" && timeout 240 sbatch --wait --output="$dir/jobs/steps.out" "$dir/jobs/steps.sbatch") >"$dir/jobs/steps.submit" 2>&1 &
steps_pid=$!

# 4. While that runs: scancel --signal=KILL on a running step ends it, srun names the killed
# tasks; then SIGKILL to one task of the next step (srun without --kill-on-bad-exit): the
# surviving rank fails its next collective on its own, and nothing hangs.
cat >"$dir/jobs/kill.sbatch" <<JOB
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
export MASTER_PORT=30234 ZERO_TIMEOUT=120
srun $train --deepspeed_config $config --steps 100000 --n-layer 1 --d-model 32 --context 32
echo "first srun exited \$?"
export MASTER_PORT=30235
srun $train --deepspeed_config $config --steps 100000 --n-layer 1 --d-model 32 --context 32
echo "second srun exited \$?"
exit 3
JOB
job=$(cd "$repo" && sbatch --parsable --output="$dir/jobs/kill.out" "$dir/jobs/kill.sbatch")
# Waits until the n-th srun step of the job prints a training step line.
wait_training() {
  for _ in $(seq 240); do
    awk -v n="$1" '/100000 steps$/ { ++h } h >= n && /\[rank 0\] step=[0-9]+,/ { found = 1 } END { exit !found }' \
      "$dir/jobs/kill.out" 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}
if wait_training 1; then
  scancel --signal=KILL "$job.0"
else
  fail "scancel: the first training step did not start: $(tail -5 "$dir/jobs/kill.out")"
fi
if wait_training 2; then
  rank1=$(scontrol listpids "$job.1" | awk '$5 == "1" { print $1; exit }')
  [ -n "$rank1" ] && kill -KILL "$rank1" || fail "no pid for rank 1 of step $job.1"
else
  fail "the second training step did not start: $(tail -5 "$dir/jobs/kill.out")"
fi
ended=0
for _ in $(seq 240); do
  if [ -z "$(squeue -h -j "$job" 2>/dev/null)" ]; then ended=1; break; fi
  sleep 0.5
done
grep -v '\] step=' "$dir/jobs/kill.out" | sed 's/^/[kill] /' | head -30
[ $ended -eq 1 ] || { fail "job $job still queued or running 120 s after the kills"; scancel "$job"; }
grep -q "first srun exited 137" "$dir/jobs/kill.out" || fail "scancel: srun did not report the killed step (exit 137)"
grep -q "tasks 0-1: Killed" "$dir/jobs/kill.out" || fail "scancel: srun did not name the killed tasks"
grep -q "task 1: Killed" "$dir/jobs/kill.out" || fail "one task killed: srun did not name it"
grep -q "second srun exited" "$dir/jobs/kill.out" || fail "one task killed: the step did not end"
grep -q "gpt_train: error: .*rank" "$dir/jobs/kill.out" || fail "one task killed: the surviving rank gave no error naming a rank"

# 3, continued: the multi-step job.
wait $steps_pid
rc=$?
grep -v '\] step=' "$dir/jobs/steps.out" | sed 's/^/[multi-step] /' | head -40
[ $rc -eq 0 ] || fail "sbatch --wait of the multi-step job exited $rc: $(cat "$dir/jobs/steps.submit")"
grep -q "gpt_train: done, 3 optimizer steps" "$dir/jobs/steps.out" || fail "multi-step: step 0 did not train"
grep -q "resumed from .* at step 3" "$dir/jobs/steps.out" || fail "multi-step: step 1 did not resume"
grep -q "gpt_train: done, 5 optimizer steps" "$dir/jobs/steps.out" || fail "multi-step: step 1 did not finish"

# 5. zerorun --launcher slurm --max_restarts 1: rank 1 of the first srun kills itself once the
# first checkpoint exists; the next srun (ZERO_RESTART_COUNT=1) resumes from it and finishes.
cat >"$dir/jobs/die_once.sh" <<'SH'
#!/bin/bash
if [ "${ZERO_RESTART_COUNT:-0}" = 0 ] && [ "${SLURM_PROCID:-}" = 1 ]; then
  "$@" &
  p=$!
  while [ ! -e "$CKPT/latest" ] && kill -0 $p 2>/dev/null; do sleep 0.05; done
  kill -9 $p
  wait $p
  exit 137
fi
exec "$@"
SH
chmod +x "$dir/jobs/die_once.sh"
out=$(cd "$repo" && CKPT=$dir/ckpt5 timeout 240 "$bin/zerorun" --launcher slurm --num_gpus 2 \
  --master_port 30236 --max_restarts 1 "$dir/jobs/die_once.sh" "$train" --deepspeed_config \
  "$config" --steps 30 --n-layer 1 --d-model 32 --context 32 --data_order epochs \
  --set checkpoint.save_dir="$dir/ckpt5" --set checkpoint.save_interval_steps=2 2>&1)
rc=$?
echo "$out" | grep -v '\] step=' | sed 's/^/[slurm restart] /' | head -30
[ $rc -eq 0 ] || fail "zerorun --launcher slurm --max_restarts 1 exited $rc"
grep -q "restart 1 of 1 after exit code" <<<"$out" || fail "slurm restart: no restart"
grep -q "gpt_train: resumed from .* at step [1-9]" <<<"$out" || fail "slurm restart: no resume"
grep -q "gpt_train: done, 30 optimizer steps" <<<"$out" || fail "slurm restart: did not finish"

if [ $failed -ne 0 ]; then
  echo "--- slurmctld.log"; tail -20 "$dir/log/slurmctld.log"
  echo "--- slurmd.log"; tail -20 "$dir/log/slurmd.log"
  exit 1
fi
echo "slurm: all checks passed"
