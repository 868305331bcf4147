#!/usr/bin/env bash
# Prepares, on a machine with package registries, what a GPU machine without one lacks, into
# ignored folders to copy there with the tree: third_party/prefix (Debian libraries), third_party/googletest (sources),
# .whl (FlashInfer and its missing Python dependencies), .whl/sglang (SGLang's Triton attention kernel
# sources, for the sglang-triton-* peers). Building and staging is build-for-device.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# FlashInfer: the newest release at the time of writing; it builds its kernels with nvcc at run
# time (tvm-ffi modules, no torch ABI), so it is independent of the device's torch version.
FLASHINFER_VERSION="${FLASHINFER_VERSION:-0.7.4}"
TVM_FFI_SPEC="${TVM_FFI_SPEC:-apache-tvm-ffi>=0.1.11,<0.2}"
# SGLang: the newest release at the time of writing. Only its Triton attention kernels are used, read
# from the wheel's sources by bench/peers/sglang_triton.py; they JIT-compile with the machine's Triton.
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
DEBS=(libhwy-dev libhwy1 libcli11-dev nlohmann-json3-dev googletest)

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "== Debian packages: ${DEBS[*]}"
(cd "$tmp" && apt-get -o APT::Sandbox::User=root download "${DEBS[@]}" >/dev/null)
rm -rf third_party/prefix third_party/googletest
mkdir -p third_party/prefix
for deb in "$tmp"/*.deb; do
  case "$(basename "$deb")" in
    googletest_*) dpkg -x "$deb" "$tmp/gtest" ;;
    *) dpkg -x "$deb" third_party/prefix ;;
  esac
done
# The -dev package's libhwy.so points at the runtime library by a relative link; keep only what
# a build needs (headers, CMake/pkg-config files, libraries).
rm -rf third_party/prefix/usr/share/doc third_party/prefix/usr/share/lintian
cp -r "$tmp/gtest/usr/src/googletest" third_party/googletest

echo "== Python wheels (Python 3.12, manylinux x86_64) into .whl/"
# Wheels are replaced; FlashInfer's compiled modules (flashinfer-aot.tar.xz, brought back from a
# device run, see docs/device.md) stay: they match the same FLASHINFER_VERSION.
mkdir -p .whl
rm -f .whl/*.whl
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
pip_download() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d "$1" "$2"
}
pip_download "$tmp/wheels" "flashinfer-python==${FLASHINFER_VERSION}"
# Of flashinfer-python's Requires-Dist, the device lacks apache-tvm-ffi (needed) and cuda-tile,
# nccl4py, nccl-extensions, nvidia-cudnn-frontend and nvidia-cutlass-dsl, whose imports FlashInfer
# guards (they serve other kernels); the rest (torch, numpy, jinja2, ninja, ...) are there.
pip_download .whl "$TVM_FFI_SPEC"
# pytest and what it imports, for the Python tests (scripts/device-python.sh), pure-Python wheels.
for w in pytest pluggy iniconfig packaging; do pip_download .whl "$w"; done
# transformers (the Hugging Face example's model) with its dependencies, into .whl/hf/; they are
# installed behind the device's own packages, so numpy and the rest there win.
rm -rf .whl/hf
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}" \
  -d .whl/hf "transformers==$(sed -n 's/^transformers==//p' python/requirements-test.txt)"
rm -f .whl/hf/numpy-*.whl .whl/hf/hf_xet-*.whl  # hf_xet serves downloads only
python3 scripts/slim_wheel.py "$tmp"/wheels/flashinfer_python-*.whl \
  ".whl/$(basename "$tmp"/wheels/flashinfer_python-*.whl)"

# SGLang's wheel cut to the Python sources of its attention kernel folder and its METADATA and
# licence (the rest is the serving stack and its compiled extensions, which the peers never import),
# into .whl/sglang/: a folder of its own, which the install of .whl/*.whl passes over.
rm -rf .whl/sglang
mkdir -p .whl/sglang
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_34_x86_64 "${platforms[@]}" -d "$tmp/sglang" "sglang==${SGLANG_VERSION}"
python3 - "$tmp"/sglang/sglang-*.whl ".whl/sglang/sglang-${SGLANG_VERSION}-triton-attention.zip" <<'EOF'
import re, sys, zipfile
keep = re.compile(r"^(sglang/kernels/ops/attention/[^/]+\.py|sglang/srt/layers/attention/triton_ops/[^/]+\.py|"
                  r"sglang-[^/]+\.dist-info/(METADATA|LICENSE[^/]*|licenses/.*))$")
with zipfile.ZipFile(sys.argv[1]) as src, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as dst:
    kept = [n for n in src.namelist() if keep.match(n)]
    for name in kept:
        dst.writestr(name, src.read(name))
print(f"sglang: {len(kept)} files of {sys.argv[1].rsplit('/', 1)[-1]} -> {sys.argv[2]}")
EOF

echo "== sizes"
du -sh third_party/prefix third_party/googletest .whl
