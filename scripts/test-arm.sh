#!/usr/bin/env bash
# The `cpu` backend's Arm targets on an x86-64 machine: cross-compiles the library (CPU only), the
# cpu and reference test executables and the `attnkit` tool for aarch64 into build-arm/
# (cmake/aarch64-linux-gnu.cmake) and runs their tests under qemu-aarch64 with CTest, the cpu
# backend's threads as on any machine (one a core). CpuTargets runs every Highway target the build
# compiled and the emulated CPU runs against `reference`, naming each ("[ target ] neon"), also with
# 256- and 128-bit SVE vectors (the sve_256 and sve2_128 targets); Cli.CheckPassesOnArmTarget.* runs
# `attnkit check --backend cpu` on each Arm target, forced. Writes build-arm/Testing/results.xml
# (JUnit); the exit status is non-zero when the build or a test failed. Needs scripts/setup.sh's Arm
# packages.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-arm -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DATTNKIT_WITH_CUDA=OFF -DATTNKIT_BUILD_BENCH=OFF -DATTNKIT_BUILD_EXAMPLES=OFF -DATTNKIT_INSTALL=OFF >/dev/null
cmake --build build-arm -j "$(nproc)" --target cpu_tests reference_tests attnkit_tool
results="$PWD/build-arm/Testing/results.xml"
rm -f "$results"
# ctest -V would print the targets' names; the JUnit file keeps every test's output instead.
ctest --test-dir build-arm -L '^(cpu_tests|reference_tests|attnkit_check)$' --timeout 600 \
  --output-on-failure -j "$(nproc)" --output-junit "$results" "$@"
targets() { grep -o "$1"' [a-z0-9_]*' "$results" | sort -u | awk '{print $NF}' | paste -sd ' '; }
echo "aarch64 targets run against reference: $(targets '\[ target \]')"
echo "aarch64 targets run by attnkit check: $(targets 'cpu target:')"
