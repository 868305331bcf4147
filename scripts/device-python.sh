#!/usr/bin/env bash
# The Python package on the GPU machine (called by device-check.sh): the extension from dist/python
# (build-for-device.sh) or, where that does not import with this python3, built here against the
# installed nanobind; then the Python tests (the GPU ones included), examples/hf_generate.py with
# `planned` and the call-overhead benchmark. Works offline: pytest comes from .whl/ if missing.
#
#   scripts/device-python.sh OUT_DIR
# Writes OUT_DIR/pytest.log, pytest.xml, hf_generate.{json,log}, accuracy.{json,log},
# python_overhead{,_cpu}.json and one line a result in OUT_DIR/python-notes.txt (device-check.sh puts
# them in its summary).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-$root/out}"
mkdir -p "$out"
notes="$out/python-notes.txt"
: >"$notes"
note() { echo "$1" >>"$notes"; echo "== $1"; }
py="${PYTHON:-python3}"
echo "python: $($py --version 2>&1), torch $($py -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1)"

package="$root/dist/python"
if ! PYTHONPATH="$package" $py -c "import attnkit" 2>"$out/python-import.log"; then
  echo "dist/python does not import here ($(tail -1 "$out/python-import.log")): building the extension"
  if cmake -S . -B build-device-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DATTNKIT_BUILD_PYTHON=ON -DATTNKIT_PYTHON_STUBS=OFF -DATTNKIT_BUILD_TESTS=OFF -DATTNKIT_BUILD_TOOLS=OFF \
      -DATTNKIT_BUILD_BENCH=OFF -DATTNKIT_BUILD_EXAMPLES=OFF -DATTNKIT_INSTALL=OFF \
      "-DPython_EXECUTABLE=$(command -v "$py")" >"$out/python-build.log" 2>&1 &&
     ninja -C build-device-py -j "$(nproc)" _attnkit >>"$out/python-build.log" 2>&1; then
    package="$root/build-device-py/python"
  else
    note "python: extension build FAILED (python-build.log)"
    tail -20 "$out/python-build.log"
    exit 1
  fi
fi
export PYTHONPATH="$package${PYTHONPATH:+:$PYTHONPATH}"
$py -c "import attnkit; print('attnkit', attnkit.__file__, 'cuda', attnkit.cuda_available(), attnkit.cuda_device_name())"

if ! $py -c "import pytest" 2>/dev/null && ls .whl/pytest-*.whl >/dev/null 2>&1; then
  $py -m pip install -q --no-index --no-deps --target /tmp/site-pytest .whl/pytest-*.whl .whl/pluggy-*.whl \
    .whl/iniconfig-*.whl .whl/packaging-*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site-pytest"
fi
if $py -c "import pytest" 2>/dev/null; then
  $py -m pytest python/tests -q -p no:cacheprovider --junitxml="$out/pytest.xml" 2>&1 | tee "$out/pytest.log"
  note "python tests: $(tail -1 "$out/pytest.log")"
else
  note "python tests: skipped, pytest is not installed (scripts/fetch-third-party.sh puts it in .whl/)"
fi

# transformers and what it imports, from .whl/hf/ (fetch-third-party.sh), behind what is installed.
if ! $py -c "import transformers" 2>/dev/null && ls .whl/hf/*.whl >/dev/null 2>&1; then
  $py -m pip install -q --no-index --no-deps --target /tmp/site-hf .whl/hf/*.whl &&
    export PYTHONPATH="$PYTHONPATH:/tmp/site-hf"
fi
if $py -c "import transformers" 2>/dev/null; then
  if $py examples/hf_generate.py --device cuda --backend planned --json "$out/hf_generate.json" \
      >"$out/hf_generate.log" 2>&1; then
    note "hf_generate: $(tail -1 "$out/hf_generate.log")"
  else
    note "hf_generate FAILED: $(tail -1 "$out/hf_generate.log")"
  fi
else
  note "hf_generate: skipped, transformers is not installed here"
fi

# attnkit's error beside cuDNN's (PyTorch SDPA) against float64, on the same bf16 prompts.
if $py bench/accuracy.py --device cuda --backends hopper planned --json "$out/accuracy.json" \
    >"$out/accuracy.log" 2>&1; then
  note "$(tail -1 "$out/accuracy.log")"
else
  note "accuracy: OVER the bound or FAILED ($(tail -1 "$out/accuracy.log"); accuracy.log)"
fi

for device in cuda cpu; do
  backend=planned suffix=""
  [[ $device == cpu ]] && backend=cpu suffix=_cpu
  if $py bench/python_overhead.py --backend "$backend" --device "$device" --json "$out/python_overhead$suffix.json" \
      >"$out/python_overhead$suffix.log" 2>&1; then
    note "overhead: $(tail -1 "$out/python_overhead$suffix.log")"
  else
    note "overhead $backend FAILED: $(tail -1 "$out/python_overhead$suffix.log")"
  fi
done
