#!/usr/bin/env bash
# The `cpu` backend's Arm targets on an x86-64 machine: cross-compiles the library (CPU only) and the
# cpu and reference test executables for aarch64 into build-arm/ (cmake/aarch64-linux-gnu.cmake)
# and runs their tests under qemu-aarch64 with CTest, the cpu backend's threads as on any machine
# (one a core). CpuTargets runs every Highway target the build compiled and the emulated CPU runs
# against `reference`, naming each ("[ target ] neon").
# Writes build-arm/Testing/results.xml (JUnit); the exit status is non-zero when the build or a
# test failed. Needs scripts/setup.sh's Arm packages.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-arm -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DATTNKIT_WITH_CUDA=OFF -DATTNKIT_BUILD_BENCH=OFF -DATTNKIT_BUILD_EXAMPLES=OFF -DATTNKIT_INSTALL=OFF >/dev/null
cmake --build build-arm -j "$(nproc)" --target cpu_tests reference_tests
results="$PWD/build-arm/Testing/results.xml"
rm -f "$results"
# ctest -V would print the targets' names; the JUnit file keeps every test's output instead.
ctest --test-dir build-arm -L '^(cpu_tests|reference_tests)$' --timeout 600 \
  --output-on-failure -j "$(nproc)" --output-junit "$results" "$@"
targets() { grep -o '\[ target \] [a-z0-9_]*' "$@" | sort -u | awk '{print $4}' | paste -sd ' '; }
echo "aarch64 targets run against reference: $(targets "$results")"
# qemu's SVE vectors are 512 bits; Highway's fixed-length SVE targets run at 256 (sve_256) and 128
# (sve2_128) bits only: the small-case targets test once at each, its failure this script's (-L /:
# cmake/aarch64-linux-gnu.cmake says why).
for bytes in 32 16; do
  log="build-arm/Testing/sve-$((bytes * 8)).log"
  qemu-aarch64 -cpu "max,sve-default-vector-length=$bytes" -L / \
    build-arm/tests/cpu_tests --gtest_filter='CpuTargets.*OnSmallCases' >"$log" 2>&1 || { cat "$log"; exit 1; }
  echo "aarch64 targets run against reference, SVE at $((bytes * 8)) bits: $(targets "$log")"
done
