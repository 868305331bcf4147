#!/usr/bin/env bash
# Installs what attnkit builds with on a fresh Debian machine (idempotent). CUDA is used when nvcc
# is found (PATH or /usr/local/cuda); without it the CPU part builds alone. On x86-64 also what the
# Arm build of scripts/test-arm.sh needs: the aarch64 cross compiler, qemu-aarch64, and arm64
# Highway and GoogleTest beside the native ones (Debian multiarch).
set -euo pipefail
packages=(cmake ninja-build g++ python3 libgtest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libhwy-dev gnuplot-nox chromium)
arm=()
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  arm=(g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libgtest-dev:arm64)
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
if ((${#arm[@]})) && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $sudo dpkg --add-architecture arm64
fi
missing=()
for p in "${packages[@]}" "${arm[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
