#!/usr/bin/env bash
# zerorun across emulated hosts (netns_cluster.sh: 3 network namespaces on a bridge, links shaped
# to 1000 Mbit/s, a real sshd in each): a rendezvous of 2 hosts x 2 ranks whose remote ranks run
# on the other host (their ssh connection arrives at its address) and get GLOO_SOCKET_IFNAME and
# .deepspeed_env; the engine's golden suite (stages 0-3 against plain LibTorch) across 2 hosts x 2
# ranks and 3 hosts x 1 rank, its bytes crossing the host links; a host whose sshd is down fails
# the launch naming it; every process of one host killed mid-run ends the job on the others, with
# no process of the job left on any host. Exits 77 (skipped) where namespaces cannot be made.
# The world discovers its hosts (node and cross-node groups) on 2 x 2 and 3 x 1, and the
# hierarchical all-reduce equals the flat one there and sends 2/3 of its bytes across hosts.
# ZeRO++'s hpZ (a secondary copy of the parameters within each host) is bitwise plain stage 3 on
# 2 x 2; qgZ (int4 gradients, all-to-all within the host and across) trains near it on 2 x 2 and
# on 3 hosts x 1; MiCS (a shard group per host) trains near it on 2 x 2.
# usage: cluster_launch.sh ZERORUN RDZV_PROG RANK_PROG ENGINE_WORKER COMM_WORKER MASTER_PORT
#        ZEROPP_WORKER
set -u
ZERORUN=$(realpath "$1") RDZV_PROG=$(realpath "$2") RANK_PROG=$(realpath "$3")
ENGINE_WORKER=$(realpath "$4") COMM_WORKER=$(realpath "$5") MASTER_PORT=$6
ZEROPP_WORKER=$(realpath "$7")
here=$(cd "$(dirname "$0")" && pwd)
export CLUSTER="l$$"
CLUSTER=${CLUSTER:0:8}
cluster() { "$here/netns_cluster.sh" "$@"; }
fail() { echo "FAILED: $*"; exit 1; }
tmp=$(mktemp -d /tmp/zero_cluster_test_XXXXXX)
trap 'cluster down; rm -rf "$tmp"' EXIT

dir=$(cluster up 3 1000)
rc=$?
[ $rc -eq 77 ] && { echo "SKIPPED: the emulated cluster cannot be built here"; exit 77; }
[ $rc -eq 0 ] || fail "netns_cluster.sh up exited $rc"
ssh_args=$(cat "$dir/ssh_args")
printf '10.213.0.1 slots=2\n10.213.0.2 slots=2\n' >"$tmp/two_by_two"
printf '10.213.0.1 slots=1\n10.213.0.2 slots=1\n10.213.0.3 slots=1\n' >"$tmp/three_by_one"
# zerorun from host 0 (node 0 runs there, the others over ssh); output in $tmp/out.
run() {
  local hostfile=$1
  shift
  cluster exec 0 timeout 180 "$ZERORUN" --hostfile "$hostfile" --master_addr 10.213.0.1 \
    --master_port "$MASTER_PORT" --ssh_port 22 --launcher_args "$ssh_args" --grace_period 2 "$@" \
    >"$tmp/out" 2>&1
}
link_bytes() {  # tx + rx of every host link
  cluster bytes | awk '{ s += $2 + $3 } END { printf "%.0f\n", s }'
}

# 1. A rendezvous across the bridge: rank 2 is host 1's local rank 0.
run "$tmp/two_by_two" --no_local_rank "$RDZV_PROG" || { cat "$tmp/out"; fail "rendezvous job"; }
for r in 0 1 2 3; do
  grep -q "^\[rank $r\] rdzv ok rank $r of 4" "$tmp/out" || { cat "$tmp/out"; fail "no rank $r"; }
done
grep -q "^\[rank 2\] rdzv ok rank 2 of 4 local 0" "$tmp/out" || fail "rank 2 is not host 1's local rank 0"

# 2. The remote ranks' environment: they run on host 1 (ssh reached its address), with the
# forwarded GLOO_SOCKET_IFNAME and the lines of .deepspeed_env.
mkdir -p "$tmp/env"
echo "FROM_ENV_FILE=over the link" >"$tmp/env/.deepspeed_env"
(cd "$tmp/env" && GLOO_SOCKET_IFNAME=eth0 run "$tmp/two_by_two" "$RANK_PROG" env "$tmp/env") ||
  { cat "$tmp/out"; fail "env job"; }
for r in 2 3; do
  f="$tmp/env/env_$r.txt"
  grep -q '^SSH_CONNECTION=10\.213\.0\.1 [0-9]* 10\.213\.0\.2 22$' "$f" ||
    { cat "$f"; fail "rank $r did not run on host 1 (10.213.0.2)"; }
  grep -q '^GLOO_SOCKET_IFNAME=eth0$' "$f" || fail "GLOO_SOCKET_IFNAME did not reach rank $r"
  grep -q '^FROM_ENV_FILE=over the link$' "$f" || fail ".deepspeed_env did not reach rank $r"
done
grep -q '^SSH_CONNECTION=<unset>$' "$tmp/env/env_0.txt" || fail "rank 0 ran over ssh, not on host 0"

# 3. The world's hosts: node groups of the ranks on one host, cross-node groups of one local index.
for layout in "two_by_two 2" "three_by_one 3"; do
  set -- $layout
  GLOO_SOCKET_IFNAME=eth0 run "$tmp/$1" --no_local_rank "$COMM_WORKER" hosts --expect-hosts "$2" ||
    { cat "$tmp/out"; fail "host discovery on $1"; }
  grep -q "rank 0 $2 hosts: " "$tmp/out" || { cat "$tmp/out"; fail "host discovery on $1"; }
  echo "hosts on $1: $(grep -m1 -o "$2 hosts: .*:" "$tmp/out")"
done

# The hierarchical all-reduce (within the host, across, within) sends 2/3 of the flat ring's bytes
# across the hosts at 2 hosts x 2 ranks: 2 N in all per all-reduce of N bytes, against the ring's
# 2 crossings x 2 (W - 1) / W N = 3 N.
declare -A across
for algo in flat hierarchical; do
  before=$(cluster bytes | awk '{ s += $2 } END { printf "%.0f\n", s }')
  GLOO_SOCKET_IFNAME=eth0 run "$tmp/two_by_two" --no_local_rank "$COMM_WORKER" allreduce-bytes \
    --algo "$algo" --mb 8 || { cat "$tmp/out"; fail "$algo all-reduce"; }
  across[$algo]=$(($(cluster bytes | awk '{ s += $2 } END { printf "%.0f\n", s }') - before))
done
python3 - "${across[flat]}" "${across[hierarchical]}" <<'PY' || fail "hierarchical all-reduce bytes"
import sys
flat, hier = map(int, sys.argv[1:])
n = 10 * 8 * 2**20  # ten all-reduces of 8 MiB
print(f"all-reduce across 2 hosts x 2 ranks: flat ring {flat / n:.2f} N, hierarchical {hier / n:.2f} N "
      f"(formulas 3 N and 2 N; ratio {hier / flat:.3f})")
sys.exit(0 if abs(flat / n - 3) < 0.3 and abs(hier / n - 2) < 0.2 else 1)
PY

# 4. The golden suite (ZeRO stages 0-3 against plain LibTorch) across hosts, over eth0.
for layout in two_by_two three_by_one; do
  before=$(link_bytes)
  GLOO_SOCKET_IFNAME=eth0 run "$tmp/$layout" --no_local_rank "$ENGINE_WORKER" --suite golden ||
    { cat "$tmp/out"; fail "golden suite on $layout"; }
  grep -q "suite golden: all checks passed" "$tmp/out" || { cat "$tmp/out"; fail "golden on $layout"; }
  crossed=$(($(link_bytes) - before))
  ((crossed > 100000)) || fail "golden on $layout: only $crossed bytes crossed the host links"
  echo "golden suite on $layout: passed, $crossed bytes over the host links"
done
GLOO_SOCKET_IFNAME=eth0 run "$tmp/two_by_two" --no_local_rank "$ZEROPP_WORKER" --suite hpz ||
  { cat "$tmp/out"; fail "hpZ suite on two_by_two"; }
# Size 4 spans the hosts (a warning says so); size 2 is the ranks of one host (no warning).
grep -q "group(s) \[0..3\] span hosts (2 hosts: \[0 1\] \[2 3\])" "$tmp/out" &&
  ! grep -q "group(s) \[0..1\]" "$tmp/out" || { cat "$tmp/out"; fail "hpZ groups and hosts"; }
echo "hpZ suite on two_by_two: bitwise equal to stage 3"
# qgZ across real (emulated) hosts: 2 x 2, and 3 x 1, an odd count of hosts.
for layout in two_by_two three_by_one; do
  GLOO_SOCKET_IFNAME=eth0 run "$tmp/$layout" --no_local_rank "$ZEROPP_WORKER" --suite qgz ||
    { cat "$tmp/out"; fail "qgZ suite on $layout"; }
  echo "qgZ suite on $layout: passed"
done
# MiCS across the hosts: a shard group per host, its replica on the other; a group of all 4
# spanning both, with hierarchical gathers (the suite's checkpoints on the shared file system).
mkdir -p "$tmp/mics"
GLOO_SOCKET_IFNAME=eth0 run "$tmp/two_by_two" --no_local_rank env ZERO_TEST_CKPT_DIR="$tmp/mics" \
  "$ZEROPP_WORKER" --suite mics || { cat "$tmp/out"; fail "MiCS suite on two_by_two"; }
grep -q "suite mics: all checks passed" "$tmp/out" || { cat "$tmp/out"; fail "MiCS on two_by_two"; }
echo "MiCS suite on two_by_two: passed"

# 5. A job whose ranks wait until killed; every process of host 1 (its sshd too) is killed.
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [[ $s != Z* ]]; }
d="$tmp/lost"
mkdir -p "$d"
run "$tmp/two_by_two" "$RANK_PROG" fail "$d" 99 0 &
job=$!
for _ in $(seq 200); do [ "$(ls "$d" | grep -c '^pid_')" -eq 4 ] && break; sleep 0.1; done
[ "$(ls "$d" | grep -c '^pid_')" -eq 4 ] || { cat "$tmp/out"; fail "the ranks did not start"; }
start=$(date +%s)
kill -9 $(ip netns pids "zc-$CLUSTER-h1")
wait "$job"
rc=$?
took=$(($(date +%s) - start))
[ $rc -ne 0 ] || fail "the job went on after host 1 was lost"
((took <= 60)) || fail "the job took $took s to end after host 1 was lost"
for _ in $(seq 100); do
  left=""
  for f in "$d"/pid_* "$d"/gpid_*; do alive "$(cat "$f")" && left="$left $(cat "$f")"; done
  [ -z "$left" ] && break
  sleep 0.1
done
[ -z "$left" ] || fail "processes of the job remain after host 1 was lost:$left"
echo "host 1 lost mid-run: the job ended in $took s (exit $rc), no process left"

# 6. A host whose sshd is down: the launch fails and names it.
# (Host 1 is gone since step 5: the job names hosts 0 and 2 only.)
kill -9 $(ip netns pids "zc-$CLUSTER-h2")
printf '10.213.0.1 slots=1\n10.213.0.3 slots=1\n' >"$tmp/hosts_0_2"
run "$tmp/hosts_0_2" --no_local_rank "$RDZV_PROG" && fail "a launch onto a host without sshd succeeded"
grep -q "10\.213\.0\.3" "$tmp/out" || { cat "$tmp/out"; fail "the launch failure does not name 10.213.0.3"; }
echo "a host without sshd: the launch failed: $(grep -m1 '10\.213\.0\.3' "$tmp/out")"
echo "cluster launch: 3 emulated hosts, rendezvous, environment, golden suite, lost host, dead sshd passed"
