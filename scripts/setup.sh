#!/usr/bin/env bash
# Installs the Debian 12 packages ds needs, only those that are missing.
# Safe to run any number of times; runs `apt-get update` only when something
# has to be installed. Needs root (or sudo).
set -euo pipefail

PKGS=(
  # compiler toolchain and build tools
  clang-22 lld-22 llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools libclang-rt-22-dev
  cmake ninja-build ccache git libgtest-dev zlib1g-dev g++
  # model format
  libonnx-dev libonnx-testdata protobuf-compiler libprotobuf-dev
  # runtime
  libopenblas-dev openmpi-bin libopenmpi-dev liburing-dev
  # tests and model generation
  python3 python3-torch python3-torchvision python3-onnx python3-numpy
  # the Python engine's extension (ds.initialize)
  python3-pybind11 python3-dev
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "setup: done"
