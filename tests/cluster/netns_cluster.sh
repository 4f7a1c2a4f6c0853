#!/usr/bin/env bash
# An emulated cluster on this machine: N hosts as network namespaces, each with one veth link
# (eth0, 10.213.0.<i+1>/24) to a bridge in a switch namespace, loopback up (the fast path between
# ranks of one host), a tbf rate limit on both directions of each link, and a real OpenSSH server
# listening on the host's address (keys generated per cluster). The addresses exist only inside
# these namespaces: no route leaves them, nothing is attached to the machine's own interfaces or
# namespace (every link is created inside a cluster namespace), no firewall or DNS is touched.
#
#   CLUSTER=name netns_cluster.sh up N [RATE_MBIT]   # prints the cluster's folder
#   CLUSTER=name netns_cluster.sh down               # kills its processes, deletes its namespaces
#   CLUSTER=name netns_cluster.sh exec I CMD...      # runs CMD on host I (inside its namespace)
#   CLUSTER=name netns_cluster.sh bytes              # "host tx_bytes rx_bytes" of each host link
#
# The folder (/tmp/zero_cluster_<name>) holds `hostfile` (one line per host, slots=1; edit the
# slots), `ssh_args` (zerorun's --launcher_args), the keys and the sshd logs. `up` removes what it
# made when it fails (and any leftovers of an earlier cluster of the name first); a test calls
# `down` from its EXIT trap. Exit 77 when the machine cannot make namespaces (not root, no
# iproute2, no sshd): the tests skip with that reason.
set -euo pipefail
name=${CLUSTER:-zero}
[[ $name =~ ^[a-z0-9]{1,8}$ ]] || { echo "netns_cluster.sh: CLUSTER must be 1-8 of [a-z0-9]" >&2; exit 2; }
prefix="zc-$name-"
source "$(dirname "$0")/../launcher/sshd_conf.sh"
dir=/tmp/zero_cluster_$name
host_ns() { echo "${prefix}h$1"; }
switch_ns="${prefix}sw"
address() { echo "10.213.0.$(($1 + 1))"; }

skip() { echo "netns_cluster.sh: cannot build the cluster here: $*" >&2; exit 77; }

# Everything of this cluster's name: processes in its namespaces, the namespaces, the folder.
down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix" || true); do
    local pids
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$dir"
}

up() {
  local n=$1 rate=${2:-1000}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 32)) || { echo "up: 1-32 hosts, got '$n'" >&2; exit 2; }
  [[ $rate =~ ^[0-9]+$ ]] && ((rate >= 1)) || { echo "up: RATE_MBIT '$rate'" >&2; exit 2; }
  [ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need it)"
  for tool in ip tc /usr/sbin/sshd ssh ssh-keygen; do
    command -v "$tool" >/dev/null || skip "$tool missing"
  done
  down  # leftovers of an earlier run of this name
  trap 'down' ERR
  mkdir -p "$dir"
  chmod 700 "$dir"
  ip netns add "$switch_ns" 2>/dev/null || { down; skip "ip netns add failed"; }
  ip -n "$switch_ns" link set lo up
  ip -n "$switch_ns" link add br0 type bridge
  ip -n "$switch_ns" link set br0 up
  ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/user_key"
  cp "$dir/user_key.pub" "$dir/authorized_keys"
  chmod 600 "$dir/authorized_keys" "$dir/user_key"
  mkdir -p /run/sshd
  : >"$dir/hostfile"
  local i
  for ((i = 0; i < n; i++)); do
    local ns
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Made inside the host's namespace, its peer moved straight into the switch's.
    ip -n "$ns" link add eth0 type veth peer name "h$i" netns "$switch_ns"
    ip -n "$ns" addr add "$(address "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$switch_ns" link set "h$i" master br0
    ip -n "$switch_ns" link set "h$i" up
    # Both directions shaped: the host's egress, and the switch port's egress toward the host.
    # The burst holds a few of the 64 KiB segments veth passes whole.
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "${rate}mbit" burst 512kb latency 100ms
    ip netns exec "$switch_ns" tc qdisc add dev "h$i" root tbf rate "${rate}mbit" burst 512kb \
      latency 100ms
    sshd_conf 22 "$(address "$i")" "$dir" "$dir/sshd_$i.pid" >"$dir/sshd_$i.conf"
    # -D without a controlling shell: the namespace's process list finds it for `down`.
    ip netns exec "$ns" /usr/sbin/sshd -D -e -f "$dir/sshd_$i.conf" >"$dir/sshd_$i.log" 2>&1 </dev/null &
    echo "$(address "$i") slots=1" >>"$dir/hostfile"
  done
  echo "-i $dir/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=5" >"$dir/ssh_args"
  # Every sshd answers, reached from host 0 across the bridge.
  for ((i = 0; i < n; i++)); do
    local ok=""
    for _ in $(seq 50); do
      # shellcheck disable=SC2046
      if ip netns exec "$(host_ns 0)" ssh $(cat "$dir/ssh_args") "$(address "$i")" true 2>/dev/null; then
        ok=1
        break
      fi
      sleep 0.1
    done
    [ -n "$ok" ] || { cat "$dir/sshd_$i.log" >&2; down; skip "sshd on host $i ($(address "$i")) does not answer"; }
  done
  trap - ERR
  echo "$dir"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  exec)
    shift
    [ $# -ge 2 ] || { echo "exec: HOST CMD..." >&2; exit 2; }
    host=$1; shift
    exec ip netns exec "$(host_ns "$host")" "$@"
    ;;
  bytes)
    for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}h" | sort -V); do
      echo "${ns#"${prefix}"h} $(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/tx_bytes) $(ip netns exec "$ns" cat /sys/class/net/eth0/statistics/rx_bytes)"
    done
    ;;
  *)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
