#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: the GPU tests, `attnkit check` over the GPU backends, `attnkit bench` and
# the peers (bench/peers) on the same shapes, then one short table. Uses the binaries staged in
# dist/ by build-for-device.sh when present, else builds there (from third_party/ when the machine has no packages).
#
#   scripts/device-check.sh [--no-tests] [--no-check] [--no-bench] [--no-peers] [--no-python] [--sanitize]
#                           [--shapes "NAME;NAME"] [--backends "a b"] [--tests "x_tests y_tests"]
# Environment: TEST_TIMEOUT (s a test executable, 300), BENCH_MAX_SECONDS (a backend and shape, 10),
# PEERS_TIMEOUT (s for all peers, 480), FLEX_SHAPES ("NAME;NAME": where FlexAttention is compiled
# and timed), PEERS_ARGS (more run_peers.py options), REPLAY_REQUESTS and REPLAY_TIMEOUT (the
# Mooncake replay's requests, 60, and seconds, 300).
# Full logs go to ./out (or the folder the variable OUT names): device-check.log, tests.log, attnkit.json, peers.json,
# summary.md, sanitizer.<tests>.<tool>.log, replay-cp.log, replay-hybrid.{json,log}, cp-decode-*.log (hosts of
# several GPUs), flashinfer-aot.tar.xz (FlashInfer's
# compiled modules, for reuse), and from the Python step pytest.log, pytest.xml, hf_generate.json,
# accuracy.json, python_overhead*.json.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"
mkdir -p "$out"
exec > >(tee -a "$out/device-check.log") 2>&1

run_tests=1 run_check=1 run_bench=1 run_peers=1 run_python=1 sanitize=0
shapes_arg="" backends_arg="" tests_arg=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-tests) run_tests=0 ;;
    --no-check) run_check=0 ;;
    --no-bench) run_bench=0 ;;
    --no-peers) run_peers=0 ;;
    --no-python) run_python=0 ;;
    --sanitize) sanitize=1 ;;
    --shapes) shapes_arg="$2"; shift ;;
    --backends) backends_arg="$2"; shift ;;
    --tests) tests_arg="$2"; shift ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "device-check: unknown option $1"; exit 2 ;;
  esac
  shift
done
shape_opts=()
if [[ -n "$shapes_arg" ]]; then IFS=';' read -r -a shapes <<<"$shapes_arg"; shape_opts=(--shapes "${shapes[@]}"); fi
summary=()
note() { summary+=("$1"); echo "== $1"; }
source scripts/peers-env.sh
section() { echo; echo "==================== $1 ($(date -u +%H:%M:%S))"; }

section "device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv,noheader || note "nvidia-smi failed"
echo "commit: $(cat dist/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"

cublas_dirs=$(scripts/cuda-lib-dirs.sh)
section "binaries"
if [[ -x dist/attnkit ]]; then
  tool=dist/attnkit
  test_dir=dist/tests
  export LD_LIBRARY_PATH="$root/dist/lib${cublas_dirs:+:$cublas_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  echo "no dist/: building here with CMake + ninja"
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a >/dev/null &&
    ninja -C build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { note "build FAILED (see build.log)"; tail -30 "$out/build.log"; }
  tool=build-device/tools/attnkit/attnkit
  test_dir=build-device/tests
  export LD_LIBRARY_PATH="${cublas_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# Tests that run the tool find it here (the path compiled into them is where they were built).
export ATTNKIT_TOOL="$root/$tool"
if ldd "$tool" | grep "not found"; then note "missing shared libraries for $tool (above)"; fi
"$tool" list || note "attnkit list FAILED"
gpu_backends="${backends_arg:-$("$tool" list 2>/dev/null | awk 'NR > 1 && $2 == "cuda" {print $1}' | paste -sd' ')}"
echo "GPU backends: ${gpu_backends:-none}"
# `mla` serves only MLA models: it is checked and timed on deepseek-v3 in its own section.
run_mla=0
[[ " $gpu_backends " == *" mla "* ]] && run_mla=1
gpu_backends=$(echo "$gpu_backends" | tr ' ' '\n' | grep -vx mla | paste -sd' ')

if [[ $run_tests == 1 ]]; then
  section "tests"
  passed=0 failed=0 skipped=0 bad=()
  for t in ${tests_arg:-$(ls "$test_dir" 2>/dev/null)}; do
    exe="$test_dir/$t"
    [[ -x "$exe" ]] || continue
    echo "-- $t"
    timeout "${TEST_TIMEOUT:-300}" "$exe" --gtest_color=no >"$out/tests.$t.tmp" 2>&1
    rc=$?
    cat "$out/tests.$t.tmp" >>"$out/tests.log"
    p=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$out/tests.$t.tmp" | tail -1)
    f=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= tests?, listed)' "$out/tests.$t.tmp" | tail -1)
    s=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= tests?, listed)' "$out/tests.$t.tmp" | tail -1)
    passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0})) skipped=$((skipped + ${s:-0}))
    grep -E '^\[  (FAILED|SKIPPED) \] [A-Za-z]|skipped  \]' "$out/tests.$t.tmp" | sort -u | head -20
    if [[ $rc -ne 0 ]]; then bad+=("$t(rc=$rc)"); [[ -z "$f" ]] && failed=$((failed + 1)); fi
    rm -f "$out/tests.$t.tmp"
  done
  note "tests: $passed passed, $failed failed, $skipped skipped${bad:+; failing binaries: ${bad[*]}}"
  # What the wgmma kernels' speed rests on, read off the machine code that runs here.
  lib=$(ls dist/lib/libattnkit.so 2>/dev/null || ls build-device/libattnkit.* 2>/dev/null | head -1)
  if [[ -n "$lib" ]]; then
    for set in hopper mla; do note "sass: $(python3 scripts/check-sass.py "$lib" --kernels $set 2>&1 | tail -1)"; done
  fi
fi

if [[ $run_check == 1 ]]; then
  section "attnkit check"
  for b in $gpu_backends; do
    if "$tool" check --backend "$b" --standard --cases 30; then note "check $b: ok"; else note "check $b: FAILED"; fi
  done
fi

if [[ $run_check == 1 && " $gpu_backends " == *" planned "* ]]; then
  # Context parallelism on one GPU: 2 ranks of planned one after another, each holding a share of
  # every request, checked against reference over the whole history.
  section "replay --cp 2 (planned, one GPU)"
  line=$(timeout 300 "$tool" replay --backend planned --cp 2 --layers 2 --max-requests 24 --max-context 4096 \
    --speed 100 --verify --verify-every 8 --no-progress 2>&1 | tee "$out/replay-cp.log" | grep -E "peak KV a rank|FAILED" |
    head -2 | paste -sd' ')
  if grep -q "no KV page leaked" "$out/replay-cp.log"; then note "replay --cp 2: ok; $line"; else note "replay --cp 2: FAILED"; fi
fi

if [[ $run_check == 1 && " $gpu_backends " == *" hopper "* && " $gpu_backends " == *" planned "* ]]; then
  # Serving long prompts: hopper's extend kernel with planned's decode against planned alone, the
  # first REPLAY_REQUESTS (60) Mooncake conversation requests (prompts clamped to 32k), llama3-8b,
  # every layer.
  section "replay: hopper prefill + planned decode, against planned (Mooncake)"
  timeout "${REPLAY_TIMEOUT:-300}" "$tool" replay --trace data/traces/mooncake_fast25_conversation_first400.jsonl \
    --backend planned --prefill-backend hopper --decode-backend planned --max-requests "${REPLAY_REQUESTS:-60}" \
    --max-context 32768 \
    --json "$out/replay-hybrid.json" --no-progress >"$out/replay-hybrid.log" 2>&1
  if grep -q "no KV page leaked" "$out/replay-hybrid.log"; then
    note "replay mooncake ${REPLAY_REQUESTS:-60}: $(awk '$2 == "cuda" && ($1 == "planned" || $1 ~ /hopper/) {print $1, "TTFT p50/90/99", $4}' \
      "$out/replay-hybrid.log" | paste -sd';')"
  else
    note "replay mooncake ${REPLAY_REQUESTS:-60}: FAILED or timed out (replay-hybrid.log)"
  fi
fi

# Context parallelism over this host's GPUs, where it has several (NCCL, a thread a GPU): the
# multi-GPU targets' figures (docs/benchmarks.md).
num_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
cp_bench=$(dirname "$tool")/bench/cp_decode_bench
[[ -x "$cp_bench" ]] || cp_bench=build-device/bench/cp_decode_bench
if [[ $run_check == 1 && $num_gpus -ge 2 && -x "$cp_bench" ]]; then
  section "context parallel decode over $num_gpus GPUs"
  timeout 300 "$cp_bench" --gpus "$num_gpus" --requests 1048576 --preset llama3-70b --layers 4 \
    2>&1 | tee "$out/cp-decode-1m.log"
  timeout 300 "$cp_bench" --gpus 2 --requests 262144x16 --preset llama3-8b --layers 4 2>&1 | tee "$out/cp-decode-16x256k.log"
  note "cp decode 1M over $num_gpus GPUs: $(grep -E 'share read rate' "$out/cp-decode-1m.log" || echo FAILED)"
  note "cp decode 16 x 256k: $(grep -E 'speed-up' "$out/cp-decode-16x256k.log" || echo FAILED)"
fi

if [[ $run_mla == 1 && $run_check == 1 ]]; then
  section "mla check (deepseek-v3, 16 and 128 heads)"
  for h in 16 128; do
    if timeout "${MLA_CHECK_TIMEOUT:-180}" "$tool" check --backend mla --preset deepseek-v3 --heads "$h" \
        --cases "${MLA_CASES:-12}" --standard; then
      note "check mla, $h heads: ok"
    else
      note "check mla, $h heads: FAILED"
    fi
  done
fi

if [[ $run_bench == 1 && -n "$gpu_backends" ]]; then
  section "attnkit bench"
  python3 bench/run_attnkit.py --tool "$tool" --json "$out/attnkit.json" --ceilings \
    --max-seconds "${BENCH_MAX_SECONDS:-10}" \
    --backends $gpu_backends "${shape_opts[@]}" || note "attnkit bench FAILED"
fi

if [[ $run_bench == 1 && " $gpu_backends " == *" jit "* ]]; then
  # jit's first call three ways, on one decode and one prefill shape: cold (an empty cache folder:
  # compile and tune), from the disk cache (a new process over that folder), and the steady median.
  section "jit first call"
  jit_cache=$(mktemp -d)
  for args in "--phase decode --batch 16 --kv-len 8192" "--phase prefill --batch 1 --kv-len 8192"; do
    for run in cold disk; do
      # shellcheck disable=SC2086 # args is a list of options
      line=$(ATTNKIT_CACHE_DIR="$jit_cache" timeout 120 "$tool" bench --backend jit $args --max-seconds 1 2>/dev/null |
        awk '$1 == "jit" {print}')
      note "jit first call, $run: ${line:-FAILED}"
    done
  done
  rm -rf "$jit_cache"
fi

if [[ $run_peers == 1 && -n "$gpu_backends" ]]; then
  section "peers"
  install_peers
  peers_opts=()
  if [[ -n "${FLEX_SHAPES:-}" ]]; then IFS=';' read -r -a fs <<<"$FLEX_SHAPES"; peers_opts=(--flex-shapes "${fs[@]}"); fi
  # shellcheck disable=SC2086 # PEERS_ARGS is a list of options
  timeout "${PEERS_TIMEOUT:-480}" python3 bench/peers/run_peers.py --json "$out/peers.json" --prebuild \
    --save-aot "$out/flashinfer-aot.tar.xz" "${shape_opts[@]}" "${peers_opts[@]}" ${PEERS_ARGS:-} || note "peers FAILED or timed out"
  section "plan time"
  if [[ " $gpu_backends " == *" planned "* ]]; then
    mla_plan=()
    [[ " $gpu_backends " == *" mla "* ]] && mla_plan=(--mla)
    (cd bench/peers && python3 plan_time.py --tool "$root/$tool" --json "$out/plan_time.json" ${mla_plan[@]+"${mla_plan[@]}"}) |
      tee "$out/plan_time.md" || note "plan time FAILED"
    while read -r line; do note "plan $line"; done < <(grep -E '^\| 256' "$out/plan_time.md")
  fi
fi

if [[ $run_python == 1 ]]; then
  section "python"
  scripts/device-python.sh "$out" || note "python step FAILED"
  while read -r line; do note "$line"; done < <(cat "$out/python-notes.txt" 2>/dev/null)
fi

if [[ $sanitize == 1 ]]; then
  section "compute-sanitizer"
  # Small shapes only: each GPU test executable's conformance cases against `reference` (the
  # filter a name; SANITIZE_FILTER replaces them all). A run where no test matched is a failure,
  # not a clean result.
  declare -A sanitize_filter=(
    [planned_decode_tests]='*Standard*'
    [cuda_naive_tests]='*Standard*'
    [planned_prefill_tests]='*PlannedPrefill.MatchesReference/*'
    [hopper_tests]='Cases/HopperExtend.*:HopperExtendGathered.*:HopperExtendFp8.*'
    [mla_tests]='DeepSeek/MlaConformance.*'
    [jit_tests]='Shapes/JitConformance.*'
  )
  for t in ${SANITIZE_TESTS:-${!sanitize_filter[@]}}; do
    [[ -x "$test_dir/$t" ]] || { note "sanitizer $t: not built"; continue; }
    filter="${SANITIZE_FILTER:-${sanitize_filter[$t]:-*Standard*}}"
    for tool_name in memcheck racecheck synccheck; do
      # synccheck's automatic count of cuda::barrier objects a block falls short of the decode
      # kernel's mbarriers ("overflow of tracked cuda::barrier structures"), and the run then fails.
      extra=()
      [[ $tool_name == synccheck ]] && extra=(--num-cuda-barriers 16384)
      log="$out/sanitizer.$t.$tool_name.log"
      compute-sanitizer --tool "$tool_name" "${extra[@]}" --error-exitcode 99 "$test_dir/$t" \
          --gtest_filter="$filter" >"$log" 2>&1
      rc=$?
      ran=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$')
      if [[ $rc == 0 && ${ran:-0} -gt 0 ]]; then
        note "sanitizer $tool_name $t: clean over $ran tests"
      elif [[ $rc == 0 ]]; then
        note "sanitizer $tool_name $t: ran no test (filter $filter)"
      else
        note "sanitizer $tool_name $t: ERRORS (see $(basename "$log"))"
      fi
    done
  done
fi

if [[ $run_mla == 1 && $run_bench == 1 ]]; then
  section "mla bench and FlashInfer's MLA wrapper"
  mla_opts=()
  if [[ $run_peers == 1 ]]; then install_peers; else mla_opts=(--no-peer); fi
  timeout "${MLA_TIMEOUT:-420}" python3 bench/peers/mla.py --tool "$tool" --json "$out/mla.json" \
    --markdown "$out/mla.md" "${mla_opts[@]}" || note "mla bench FAILED or timed out"
  [[ -f "$out/mla.md" ]] && while read -r line; do note "mla $line"; done < <(grep -E '^\| (decode|verify|extend)' "$out/mla.md")
fi

section "summary"
printf '%s\n' "${summary[@]}"
[[ -f "$out/attnkit.json" ]] && python3 bench/summarize.py --attnkit "$out/attnkit.json" --peers "$out/peers.json" --markdown "$out/summary.md"
