#!/usr/bin/env bash
# Installs every Debian package Plexus needs. Idempotent: skips apt when all are present.
set -euo pipefail
source "$(dirname "$0")/../scripts/script_args.sh"
script_help "$@"
script_no_args "$@"

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libssl-dev libsqlite3-dev zlib1g-dev libuv1-dev
  libgtest-dev libgmock-dev libbenchmark-dev librapidcheck-dev
  libcli11-dev libtomlplusplus-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  dataset-fashion-mnist fortunes gnuplot-nox
  clang-14 libclang-rt-14-dev clang-format
  libopenmpi-dev openmpi-bin
  systemd python3-yaml chromium
  python3-torch python3-numpy python3-dev pybind11-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=300 update -q
$SUDO apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${missing[@]}"
