#!/usr/bin/env bash
# Builds, here, the attnkit tool and every test executable for the H200 (Release, sm_90a, static
# CUDA runtime, libattnkit as one shared library) and stages them with the non-system shared
# libraries they need into dist/; copy dist/ to the GPU machine with the tree, where
# device-check.sh runs them.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-device}"
dist="${DIST_DIR:-$root/dist}"
jobs="${JOBS:-2}"
cuda_lib="${CUDA_LIB_DIR:-/usr/local/cuda/lib64}"

# Static CUDA runtime: CUDA::cudart is pointed at libcudart_static.a through its cache variable
# (FindCUDAToolkit keeps a preset value), so the binaries need only the driver's libcuda there.
# libattnkit is shared so the dozen test executables do not each carry every kernel's fatbin
# (dist/ stays a few tens of MB). The rpath finds it both in the build tree (ctest here)
# and in dist/ (lib/ beside the tool, ../lib beside the tests).
rpath='$ORIGIN;$ORIGIN/..;$ORIGIN/../..;$ORIGIN/lib;$ORIGIN/../lib;$ORIGIN/../../lib'
# The Python extension is built for the device's interpreter (DEVICE_PYTHON, default a python3.12
# here), against nanobind installed for it in a virtual environment under the build folder.
device_python="${DEVICE_PYTHON:-}"
if [[ -z "$device_python" ]]; then
  # The first candidate that runs (a pyenv shim is on PATH whether or not it can run 3.12).
  for candidate in $(command -v python3.12) "$(pyenv root 2>/dev/null)"/versions/3.12*/bin/python3.12; do
    if [[ -x "$candidate" ]] && "$candidate" -c "" 2>/dev/null; then device_python="$candidate"; break; fi
  done
fi
python_args=()
if [[ -n "$device_python" ]]; then
  "$device_python" -m venv "$build/py-venv" && "$build/py-venv/bin/pip" install -q nanobind==3.1.0 &&
    python_args=(-DATTNKIT_BUILD_PYTHON=ON -DATTNKIT_PYTHON_STUBS=OFF "-DPython_EXECUTABLE=$build/py-venv/bin/python")
fi
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DCMAKE_CUDA_RUNTIME_LIBRARY=Static \
  -DCUDA_cudart_LIBRARY="$cuda_lib/libcudart_static.a" \
  -DBUILD_SHARED_LIBS=ON \
  -DATTNKIT_BUILD_TESTS=ON \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  "-DCMAKE_INSTALL_RPATH=$rpath" \
  "${python_args[@]}" \
  ${ATTNKIT_CMAKE_ARGS:-} >/dev/null
ninja -C "$build" -j "$jobs"

rm -rf "$dist"
mkdir -p "$dist/lib" "$dist/tests"
cp "$build/tools/attnkit/attnkit" "$dist/"
cp "$build"/libattnkit.so* "$dist/lib/" 2>/dev/null || cp "$build"/*/libattnkit.so* "$dist/lib/"
# Every test executable CMake built (the names come from the build tree, so new ones are picked up).
while IFS= read -r exe; do
  cp "$exe" "$dist/tests/"
done < <(find "$build/tests" -maxdepth 1 -type f -executable -name '*_tests' 2>/dev/null)

# The Python package with its extension (dist/python/attnkit), where it was built.
if [[ -d "$build/python/attnkit" ]]; then
  mkdir -p "$dist/python" && cp -r "$build/python/attnkit" "$dist/python/"
else
  echo "no Python 3.12 here (DEVICE_PYTHON): dist/ has no Python package; device-python.sh builds it there"
fi

# The planners' host-cost benchmarks, where Google Benchmark was found (timed on the device's
# host), and the context-parallel decode across the host's GPUs.
for b in planned_plan_bench mla_plan_bench cp_decode_bench; do
  [[ -x "$build/bench/$b" ]] && mkdir -p "$dist/bench" && cp "$build/bench/$b" "$dist/bench/"
done

# Shared libraries the device image lacks: anything not from the C/C++ runtime, the driver or
# the CUDA toolkit (libcublas is in the toolkit there). Copied with their soname.
missing_ok='linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so|libcuda\.so|libcublas|libcublasLt|libattnkit'
for bin in "$dist/attnkit" "$dist"/tests/* "$dist"/bench/* "$dist"/lib/libattnkit.so* "$dist"/python/attnkit/*.so; do
  [[ -f "$bin" ]] || continue
  ldd "$bin" | awk '/=>/ {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! grep -Eq "$missing_ok" <<<"$name" && [[ -f "$path" ]]; then
    cp -L "$path" "$dist/lib/$name"
  fi
done
git -C "$root" rev-parse --short HEAD > "$dist/COMMIT"
git -C "$root" status --porcelain --untracked-files=no | grep -q . && echo "(with uncommitted changes)" >> "$dist/COMMIT"

echo "== dist/ ($(du -sh "$dist" | cut -f1))"
ls -la "$dist" "$dist/lib" "$dist/tests"
echo "== what the tool needs (ldd)"
ldd "$dist/attnkit"
