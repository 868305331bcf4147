#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (GPU tests skip themselves without a GPU), and ends
# on one line: passed, failed, skipped and why (scripts/test-summary.py). The exit status is
# non-zero exactly when a test failed (or the build did).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The Python tests' environment (PyTorch, transformers, nanobind: scripts/python-env.sh), whose
# interpreter the extension is built for.
python="$(scripts/python-env.sh)"
scripts/build.sh -DATTNKIT_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$python"
results="$PWD/build/Testing/results.xml"
py_results="$PWD/build/Testing/pytest.xml"
rm -f "$results" "$py_results"
# CTest's own closing lists (every skipped test by name, "100% tests passed" beside them) give way
# to the summary below.
set +e
ctest --test-dir build --output-on-failure -j "$(nproc)" --output-junit "$results" |
  awk '/^The following tests did not run:/ {skip = 1; next}
       skip && /^\t/ {next}
       {skip = 0}
       /^[0-9]+% tests passed/ {next}
       {print; fflush()}'
status=${PIPESTATUS[0]}
# The Python package's tests (python/tests), against the package laid out in build/python.
echo
PYTHONPATH="$PWD/build/python" "$python" -m pytest python/tests -q -p no:cacheprovider --junitxml="$py_results" ||
  status=1
# The cpu backend's Arm targets, cross-compiled and run under qemu-aarch64 (scripts/test-arm.sh),
# where the cross compiler is installed; their tests count in the summary line.
arm_results=()
if command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; then
  echo
  scripts/test-arm.sh || status=1
  [[ -f build-arm/Testing/results.xml ]] && arm_results=(build-arm/Testing/results.xml)
fi
set -e
if [[ -f "$results" ]]; then
  echo
  python3 scripts/test-summary.py "$results" "${arm_results[@]}" $([[ -f "$py_results" ]] && echo "$py_results")
fi
exit "$status"
