#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: the correctness half of device-check.sh in parallel lanes, so it takes
# as long as its longest lane (about 8 minutes on an H200) instead of their sum. The lanes are
# independent processes sharing the GPU: none of them times anything.
#   hopper:  hopper_tests, ptx_wrappers_tests, planned_prefill_tests, attnkit check (bf16, fp8 products)
#   jit:     jit_tests (DeepSeek's latent cases first), attnkit check (standard, deepseek-v3 16 / 128 heads)
#   mla:     mla_tests, mla_graph_tests, parallel_tests, attnkit check (deepseek-v3 16 / 128 heads), SASS
#   sanitize: memcheck, racecheck, synccheck over hopper's conformance cases; racecheck, memcheck over mla's
#   flashinfer: compiles the FlashInfer peers' modules (CPU) and packs them for the speed runs
# Runs the tool and tests in dist/ (scripts/build-for-device.sh builds them for sm_90a). Writes ./out,
# or the folder OUT names: lane-*.txt (a line a step), logs.tgz (every log), and
# flashinfer-aot.tar.xz (FlashInfer's compiled modules: put it in .whl/ and device-check.sh's peers
# load them instead of compiling).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"
logs="$out/verify-logs"
mkdir -p "$logs"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
export LD_LIBRARY_PATH="$root/dist/lib:$(scripts/cuda-lib-dirs.sh)"
export ATTNKIT_TOOL="$root/dist/attnkit" PYTHONUNBUFFERED=1
tests=dist/tests tool=dist/attnkit
lane_seconds="${LANE_SECONDS:-300}"
source scripts/peers-env.sh

# A gtest executable: its name, time and the PASSED/FAILED lines.
gtest() {
  local name=$1 start=$SECONDS
  shift
  timeout "$lane_seconds" "$@" --gtest_color=no >"$logs/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - start))s $(grep -E '^\[  (PASSED|FAILED) ' "$logs/$name.log" | paste -sd' ')"
  grep -E '^\[  FAILED  \] [A-Z]' "$logs/$name.log" | head
}
# Any other command: its name, time and the last line it printed.
step() {
  local name=$1 start=$SECONDS
  shift
  timeout 240 "$@" >"$logs/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - start))s $(tail -1 "$logs/$name.log")"
}
sanitize() {
  local tool_name=$1 exe=$2 filter=$3 start=$SECONDS extra=()
  [[ $tool_name == synccheck ]] && extra=(--num-cuda-barriers 16384)
  local log="$logs/sanitizer.$(basename "$exe").$tool_name.log"
  timeout 200 compute-sanitizer --tool "$tool_name" "${extra[@]}" --error-exitcode 99 "$tests/$exe" \
    --gtest_filter="$filter" >"$log" 2>&1
  echo "sanitizer $tool_name $exe rc=$? $((SECONDS - start))s $(grep -E '^\[  PASSED|SUMMARY' "$log" | paste -sd' ')" \
    "$(grep -c '^\[       OK' "$log") cases ran"
}

lane_hopper() {
  gtest hopper_tests $tests/hopper_tests
  gtest ptx_wrappers_tests $tests/ptx_wrappers_tests
  step check-hopper $tool check --backend hopper --standard --cases 30
  step check-hopper-fp8 $tool check --backend hopper --hopper-fp8-products --cases 16
  gtest planned_prefill_tests $tests/planned_prefill_tests
}
lane_jit() {
  gtest jit_latent_tests $tests/jit_tests --gtest_filter='DeepSeek/*'
  gtest jit_tests $tests/jit_tests --gtest_filter='-DeepSeek/*'
  step check-jit $tool check --backend jit --standard --cases 30
  step check-jit-deepseek16 $tool check --backend jit --preset deepseek-v3 --heads 16 --cases 12 --standard
  step check-jit-deepseek128 $tool check --backend jit --preset deepseek-v3 --heads 128 --cases 8
}
lane_mla() {
  gtest mla_tests $tests/mla_tests
  gtest mla_graph_tests $tests/mla_graph_tests
  gtest parallel_tests $tests/parallel_tests
  for heads in 16 128; do
    step "check-mla$heads" $tool check --backend mla --preset deepseek-v3 --heads $heads --cases 12 --standard
  done
  for set in hopper mla; do echo "sass $set: $(python3 scripts/check-sass.py dist/lib/libattnkit.so --kernels $set 2>&1 | tail -1)"; done
}
lane_sanitize() {
  for t in memcheck racecheck synccheck; do
    sanitize $t hopper_tests 'Cases/HopperExtend.*:HopperExtendGathered.*:HopperExtendFp8.*'
  done
  for t in racecheck memcheck; do sanitize $t mla_tests 'DeepSeek/MlaConformance.*'; done
}
lane_flashinfer() {
  if ! ls .whl/*.whl >/dev/null 2>&1; then echo "no .whl/: nothing to compile"; return; fi
  install_peers --without-compiled
  (cd bench/peers && timeout 400 python3 -c "
import run_peers, peers
run_peers.prebuild_flashinfer([n for n in peers.PEERS if peers.PEERS[n][2]], {64, 128, 256})")
  # The MLA wrapper's module, from one small shape.
  timeout 150 python3 bench/peers/mla.py --tool "$tool" --json "$logs/mla-compile.json" --markdown "$logs/mla-compile.md" \
    --shapes "decode h16 128x4096" >"$logs/mla-compile.log" 2>&1
  (cd bench/peers && python3 -c "import run_peers; run_peers.save_aot('$out/flashinfer-aot.tar.xz')")
}

pids=()
for lane in hopper jit mla sanitize flashinfer; do
  "lane_$lane" >"$out/lane-$lane.txt" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for lane in hopper jit mla sanitize flashinfer; do echo "## $lane"; cat "$out/lane-$lane.txt"; done
tar czf "$out/logs.tgz" -C "$out" verify-logs && rm -rf "$logs"
