#!/usr/bin/env bash
# zerorun's ssh path against a real sshd on 127.0.0.1:SSH_PORT (keys generated into a temp dir).
# Node 0 runs locally ("localhost"), node 1 is reached over ssh ("127.0.0.1"). Exits 77 (skipped)
# when sshd cannot be started here (not root, no openssh-server, sandbox forbids it).
# usage: ssh_test.sh ZERORUN RANK_PROG RDZV_PROG SSH_PORT MASTER_PORT
set -u
ZERORUN=$(realpath "$1") RANK_PROG=$(realpath "$2") RDZV_PROG=$(realpath "$3") SSH_PORT=$4 MASTER_PORT=$5

skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "sshd needs root to log in as the current user here"
for tool in /usr/sbin/sshd ssh ssh-keygen; do command -v "$tool" >/dev/null || skip "$tool missing"; done

tmp=$(mktemp -d /tmp/zerorun_ssh_XXXXXX)
sshd_pid=""
cleanup() {
  [ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null && wait "$sshd_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

ssh-keygen -q -t ed25519 -N '' -f "$tmp/host_key" || skip "ssh-keygen failed"
ssh-keygen -q -t ed25519 -N '' -f "$tmp/user_key" || skip "ssh-keygen failed"
cp "$tmp/user_key.pub" "$tmp/authorized_keys"
chmod 600 "$tmp/authorized_keys" "$tmp/user_key"
source "$(dirname "$0")/sshd_conf.sh"
sshd_conf "$SSH_PORT" 127.0.0.1 "$tmp" "$tmp/sshd.pid" > "$tmp/sshd_config"
mkdir -p /run/sshd 2>/dev/null
/usr/sbin/sshd -D -e -f "$tmp/sshd_config" 2>"$tmp/sshd.log" &
sshd_pid=$!

SSH_ARGS="-i $tmp/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"
ok=""
for _ in $(seq 50); do
  if ssh $SSH_ARGS -p "$SSH_PORT" 127.0.0.1 true 2>/dev/null; then ok=1; break; fi
  kill -0 "$sshd_pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$ok" ] || skip "could not start or reach sshd on port $SSH_PORT: $(tail -3 "$tmp/sshd.log")"

printf 'localhost slots=2\n127.0.0.1 slots=1\n' > "$tmp/hostfile"
run() {  # zerorun over ssh with the test's keys; output in $tmp/out, $tmp/err
  timeout 60 "$ZERORUN" --hostfile "$tmp/hostfile" --master_addr 127.0.0.1 \
    --master_port "$MASTER_PORT" --ssh_port "$SSH_PORT" --launcher_args "$SSH_ARGS" \
    --grace_period 2 "$@" >"$tmp/out" 2>"$tmp/err"
}

# 1. One 3-rank job over two "nodes" that really rendezvous through TCPStore.
run --no_local_rank "$RDZV_PROG"
rc=$?
[ $rc -eq 0 ] || { cat "$tmp/out" "$tmp/err"; fail "rendezvous job exited $rc"; }
for r in 0 1 2; do
  grep -q "^\[rank $r\] rdzv ok rank $r of 3" "$tmp/out" || { cat "$tmp/out" "$tmp/err"; fail "no rank $r"; }
done
grep -q "^\[rank 2\] rdzv ok rank 2 of 3 local 0" "$tmp/out" || fail "rank 2 is not node 1's local rank 0"

# 2. Forwarded variables (ZERO_*) and the environment of the remote rank.
# ssh starts a fresh environment: only forwarded variables and .deepspeed_env lines arrive.
mkdir -p "$tmp/env"
echo "FROM_ENV_FILE=file line" > "$tmp/env/.deepspeed_env"
(cd "$tmp/env" && ZERO_TEST_FORWARDED=over-ssh run "$RANK_PROG" env "$tmp/env" x)
[ $? -eq 0 ] || { cat "$tmp/err"; fail "env job failed"; }
grep -q '^ZERO_TEST_FORWARDED=over-ssh$' "$tmp/env/env_2.txt" || fail "ZERO_* not forwarded"
grep -q '^FROM_ENV_FILE=file line$' "$tmp/env/env_2.txt" || fail ".deepspeed_env not forwarded"
grep -q '^RANK=2$' "$tmp/env/env_2.txt" && grep -q '^LOCAL_RANK_ARG=0$' "$tmp/env/env_2.txt" \
  && grep -q '^WORLD_SIZE=3$' "$tmp/env/env_2.txt" || { cat "$tmp/env/env_2.txt"; fail "remote env"; }

# 3. The remote rank fails: zerorun exits with its code and nothing of the job remains.
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$s" ] && [[ $s != Z* ]]; }
check_gone() {
  for _ in $(seq 100); do
    local left=0
    for f in "$1"/pid_* "$1"/gpid_*; do alive "$(cat "$f")" && left=1; done
    [ $left -eq 0 ] && return 0
    sleep 0.1
  done
  fail "processes of the job remain: $(for f in "$1"/*pid_*; do ps -o pid=,stat=,args= -p "$(cat "$f")"; done)"
}
for failing in 2 0; do  # remote rank 2, then local rank 0 (the ssh side must be torn down)
  d="$tmp/fail$failing"; mkdir -p "$d"
  run "$RANK_PROG" fail "$d" "$failing" 7
  rc=$?
  [ $rc -eq 7 ] || { cat "$tmp/err"; fail "rank $failing exiting 7: zerorun exited $rc"; }
  [ "$(ls "$d" | grep -c pid_)" -eq 6 ] || fail "missing pid files in $d"
  check_gone "$d"
  [ -n "${ZERORUN_SSH_TEST_VERBOSE:-}" ] && cat "$tmp/out" "$tmp/err"
done
# 4. The same through pdsh (when installed): ssh options travel in PDSH_SSH_ARGS_APPEND.
if command -v pdsh >/dev/null; then
  runp() {
    PDSH_SSH_ARGS_APPEND="$SSH_ARGS" timeout 60 "$ZERORUN" --launcher pdsh --hostfile "$tmp/hostfile" \
      --master_addr 127.0.0.1 --master_port "$MASTER_PORT" --ssh_port "$SSH_PORT" --grace_period 2 \
      "$@" >"$tmp/out" 2>"$tmp/err"
  }
  runp --no_local_rank "$RDZV_PROG"
  rc=$?
  [ $rc -eq 0 ] || { cat "$tmp/out" "$tmp/err"; fail "pdsh rendezvous job exited $rc"; }
  grep -q "rank 2\] rdzv ok rank 2 of 3 local 0" "$tmp/out" || { cat "$tmp/out"; fail "pdsh: no rank 2"; }
  for failing in 2 0; do
    d="$tmp/pdsh_fail$failing"; mkdir -p "$d"
    runp "$RANK_PROG" fail "$d" "$failing" 7
    rc=$?
    [ -n "${ZERORUN_SSH_TEST_VERBOSE:-}" ] && cat "$tmp/out" "$tmp/err"
    [ $rc -eq 7 ] || { cat "$tmp/out" "$tmp/err"; fail "pdsh: rank $failing exiting 7: zerorun exited $rc"; }
    check_gone "$d"
  done
  echo "pdsh launcher passed"
fi
echo "ssh launcher: rendezvous, env forwarding and teardown over sshd on port $SSH_PORT passed"
if ! command -v pdsh >/dev/null; then
  echo "pdsh not installed (scripts/setup.sh installs it): the pdsh half could not run"
  exit 77
fi
