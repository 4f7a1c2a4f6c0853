#!/usr/bin/env bash
# The README's test command on a fresh Debian 12, timed with its installs: debootstrap makes a
# minimal bookworm (what a new machine has before anything is installed) in a scratch directory,
# this repository's HEAD is cloned into it, and scripts/test.sh runs there as root: it installs
# the packages (scripts/setup.sh), builds cold (no ccache yet) and runs every test. Prints the
# minutes of each part and the suite's last lines; exits with scripts/test.sh's status.
# The chroot shares the host's kernel, network namespace and CPUs; its /proc, /sys, /dev, /run
# are mounted for it (and the directory bound onto itself, so `ip netns` can make its mounts
# private there). Everything it made is unmounted and removed at the end, also on failure or
# interruption. Needs root and the Debian mirror; installs debootstrap when missing.
# Environment: FRESH_ROOT (/var/tmp/zero-fresh), MIRROR (http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" -eq 0 ] || { echo "fresh_machine.sh: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
root=${FRESH_ROOT:-/var/tmp/zero-fresh}
mirror=${MIRROR:-http://deb.debian.org/debian}
[ ! -e "$root" ] || { echo "fresh_machine.sh: $root exists; remove it or set FRESH_ROOT" >&2; exit 2; }

mounted() { findmnt -rn -o TARGET | awk -v r="$root" 'index($0, r) == 1' | sort -r; }
cleanup() {
  # Processes left in the chroot (a test's daemon) first, then the mounts, deepest first.
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
  done
  sleep 1
  for m in $(mounted); do umount "$m" 2>/dev/null || umount -l "$m" || true; done
  if [ -z "$(mounted)" ]; then rm -rf "$root"; else echo "fresh_machine.sh: still mounted under $root; not removed" >&2; fi
}
trap cleanup EXIT

command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
t0=$(date +%s)
debootstrap --variant=minbase bookworm "$root" "$mirror" >/tmp/fresh_debootstrap.log 2>&1 ||
  { tail -20 /tmp/fresh_debootstrap.log >&2; exit 1; }
t1=$(date +%s)
# A new machine's apt sources: the release, its updates and security.
rm -f "$root/etc/apt/sources.list"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount -t devpts devpts "$root/dev/pts" -o newinstance
mount -t tmpfs tmpfs "$root/dev/shm"
mount -t tmpfs tmpfs "$root/run"
git clone -q . "$root/root/zero"

echo "fresh_machine.sh: $(git log --oneline -1 | cut -c1-60)..., debootstrap $(((t1 - t0) / 60)) min $(((t1 - t0) % 60)) s"
t2=$(date +%s)
set +e
chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  /bin/bash -c 'cd /root/zero && scripts/test.sh' >/tmp/fresh_test.log 2>&1
rc=$?
set -e
t3=$(date +%s)
installs=$(grep -o 'setup: installing' /tmp/fresh_test.log | head -1)
tail -25 /tmp/fresh_test.log
echo
echo "| part | time |"
echo "|---|---|"
echo "| scripts/test.sh on the fresh machine (installs, cold build, every test) | $(((t3 - t2) / 60)) min $(((t3 - t2) % 60)) s |"
echo "| exit status | $rc${installs:+ (it installed the packages)} |"
exit $rc
