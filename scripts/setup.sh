#!/usr/bin/env bash
# Installs what attnkit builds with on a fresh Debian machine (idempotent). CUDA is used when nvcc
# is found (PATH or /usr/local/cuda); without it the CPU part builds alone.
set -euo pipefail
packages=(cmake ninja-build g++ python3 libgtest-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev libhwy-dev gnuplot-nox chromium)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
