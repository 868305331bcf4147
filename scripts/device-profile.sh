#!/usr/bin/env bash
# Hardware counters (Nsight Compute) of attnkit's kernels and, for the same shape, of a FlashInfer
# peer's, so a gap between the two can be read as bytes, requests and stalls rather than guessed.
# Runs on the GPU machine, in a tree with dist/ (scripts/build-for-device.sh) and .whl/.
#
#   scripts/device-profile.sh "decode 64x16384" [more shape names...]
#
# Shape names are bench/peers/shapes.py's. Per shape: every kernel of one attnkit forward with its
# time and DRAM bytes, then the full sections of attnkit's main kernel and of the peer's.
# Env: PROFILE_PEER (default flashinfer-decode-tc; "none" skips it), ATTNKIT_KERNEL (regex,
# default decode_kernel), PEER_KERNEL (regex, default Prefill|Decode), BACKEND (default planned),
# PROFILE_METRICS ("a,b": only these metrics of the two main kernels, e.g. sm__cycles_active.max).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${OUT:-$root/out}"
mkdir -p "$out"
backend="${BACKEND:-planned}"
peer="${PROFILE_PEER:-flashinfer-decode-tc}"
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Chart
  --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats)
[[ -n "${PROFILE_METRICS:-}" ]] && sections=(--metrics "$PROFILE_METRICS")
# Clocks are left as they are: that is how the benchmarks run.
ncu_base=(ncu --clock-control none --target-processes all)

cublas_dirs=$(scripts/cuda-lib-dirs.sh)
export LD_LIBRARY_PATH="$root/dist/lib${cublas_dirs:+:$cublas_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [[ "$peer" != none ]] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} FLASHINFER_WORKSPACE_BASE=/tmp
  if [[ -f .whl/flashinfer-aot.tar.xz ]]; then
    mkdir -p /tmp/site/flashinfer/data/aot && tar -xJf .whl/flashinfer-aot.tar.xz -C /tmp/site/flashinfer/data/aot
  fi
fi
ncu --version | tail -1

for shape in "$@"; do
  tag=$(tr ' +' '__' <<<"$shape")
  args=$(python3 bench/peers/shapes.py bench-args "$shape") || { echo "unknown shape: $shape"; continue; }
  bench_argv=() && eval "bench_argv=($args)"  # as the shell would split them: a mask expression is one quoted word
  echo "==================== $shape: attnkit $backend ($args)"
  # Every kernel of the 4th..6th timed forwards (store, decode, merge...): time and DRAM bytes.
  [[ -z "${PROFILE_METRICS:-}" ]] && "${ncu_base[@]}" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed \
    -s 12 -c 9 dist/attnkit bench --backend "$backend" "${bench_argv[@]}" --warmup 2 --repeats 4 >"$out/ncu.$tag.kernels.txt" 2>&1
  [[ -z "${PROFILE_METRICS:-}" ]] && grep -E "^\s+[a-z_]+.*\(|gpu__time|dram__|lts__|sm__throughput" "$out/ncu.$tag.kernels.txt" | head -80
  "${ncu_base[@]}" -k "regex:${ATTNKIT_KERNEL:-decode_kernel}" -s 2 -c 1 "${sections[@]}" \
    dist/attnkit bench --backend "$backend" "${bench_argv[@]}" --warmup 2 --repeats 2 >"$out/ncu.$tag.attnkit.txt" 2>&1
  tail -n +1 "$out/ncu.$tag.attnkit.txt" | grep -vE "^==PROF==|^\s*$" | head -150
  if [[ "$peer" != none ]]; then
    echo "==================== $shape: $peer"
    "${ncu_base[@]}" -k "regex:${PEER_KERNEL:-Prefill|Decode}" -s 3 -c 1 "${sections[@]}" \
      python3 bench/peers/run_peers.py --no-ceilings --shapes "$shape" --peers "$peer" >"$out/ncu.$tag.peer.txt" 2>&1
    grep -vE "^==PROF==|^\s*$" "$out/ncu.$tag.peer.txt" | grep -v "^\[" | head -150
  fi
done
