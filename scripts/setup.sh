#!/usr/bin/env bash
# Installs the Debian packages this project builds and tests with, when any is missing.
# Called by both README commands; does nothing when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache git
  mold  # the linker CMake picks when present (cmake/ZeroBuildSpeed.cmake)
  libtorch-dev nlohmann-json3-dev libspdlog-dev catch2 libgloo-dev
  openmpi-bin openssh-server openssh-client procps psmisc pdsh
  clang libclang-rt-14-dev
  libopenblas0-serial
  liburing-dev fio  # offload/: io_uring swap files; benchmarks/offload compares with fio
  python3-torch  # tests: Python's own reader of our exports
  libprotobuf-dev protobuf-compiler  # the tensorboard monitor's Event/Summary messages
  python3-protobuf python3-pil librsvg2-bin  # tests: read TensorBoard files, render `zero plot`
  slurm-wlm  # tests/slurm: a real one-host Slurm cluster (slurmctld + slurmd)
  python3-yaml  # tests/k8s: reads the Kubernetes manifests
  iproute2  # tests/cluster: network namespaces, veth, bridge, tc (tbf)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup: missing packages (${missing[*]}) and not root; install them with apt-get" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
