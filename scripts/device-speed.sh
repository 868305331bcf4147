#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: the speed half of device-check.sh, one section a backend, each timed
# beside its peers in the same run, the whole within a time limit (each step's timeout is cut to
# the seconds left, so a short limit still leaves every finished figure on disk).
#
#   scripts/device-speed.sh SECTION [SECTION ...]
#
#   mla       mla against FlashInfer's MLA wrapper on every bench/peers/mla.py shape, then jit's
#             latent kernels on three of them
#   plan      plan host time against FlashInfer's plan(), mla's too (bench/peers/plan_time.py)
#   hopper    hopper and planned against FlashInfer's sm90 path (ragged and paged) and cuDNN on the
#             prefill shapes, and hopper's fp8 products against its bf16 cache
#   jit       jit and planned against SGLang's Triton kernels and FlexAttention, the score/mask
#             variants included
#   jitfirst  jit's first call cold and from the disk cache, `warmup --tune` timed, head dims 96
#             and 192/128 beside 128
#   replay    Mooncake conversation trace, hopper prefill + planned decode against planned alone
#             (REPLAY_REQUESTS, default 200, prompts clamped to 16k)
#   profile   Nsight Compute of hopper's extend kernel and FlashInfer's sm90 kernel (device-profile.sh)
#   mlaprofile  Nsight Compute of mla's 64-row kernel (128 heads, 128 x 8192) and of FlashInfer's MLA
#             kernel on the same batch, then of the narrow kernel over the fp8_blocked cache (16 heads)
#   jitprofile  Nsight Compute of jit's prefill kernel and FlexAttention's on the document mask and
#             on plain causal (where jit trails FlexAttention), and on d96 (jit alone)
#
# Env: SPEED_SECONDS (the limit, default 570), BEFORE (a folder staged like dist/, e.g. the build
# before a change: mla and jit then also time it on the shapes that change touches, for a ratio in
# the same run). Runs dist/ (scripts/build-for-device.sh). Writes ./out (or the folder OUT names):
# speed.log, and speed.tar.xz holding every JSON and table.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
out="${OUT:-$root/out}"
res="$out/speed"
mkdir -p "$res"
exec > >(tee -a "$out/speed.log") 2>&1
[[ $# -gt 0 ]] || { sed -n 2,28p "$0"; exit 2; }
start=$(date +%s)
limit="${SPEED_SECONDS:-570}"
step() { echo "== $(($(date +%s) - start)) s, $(date -u +%H:%M:%S): $*"; }
# min(cap, seconds left), at least 5.
cap() {
  local left=$((limit - ($(date +%s) - start)))
  ((left < 5)) && left=5
  ((${1} < left)) && echo "$1" || echo "$left"
}
pack() { step "packing"; tar -C "$out" -cJf "$out/speed.tar.xz" speed; }
trap pack EXIT

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
echo "commit: $(cat dist/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
cuda_dirs=$(scripts/cuda-lib-dirs.sh)
export LD_LIBRARY_PATH="$root/dist/lib${cuda_dirs:+:$cuda_dirs}"
export ATTNKIT_TOOL="$root/dist/attnkit"
tool=dist/attnkit
# The build before: its library first, the rest (Highway) from dist/lib.
before_ld="${BEFORE:+$root/$BEFORE/lib:}$LD_LIBRARY_PATH"
source scripts/peers-env.sh
install_peers

section_mla() {
  step "mla and FlashInfer's MLA"
  timeout "$(cap 240)" python3 bench/peers/mla.py --tool "$tool" --json "$res/mla.json" --markdown "$res/mla.md" \
    >"$res/mla.log" 2>&1
  cat "$res/mla.md" 2>/dev/null
  if [[ -n "${BEFORE:-}" ]]; then
    step "mla, the build before"
    LD_LIBRARY_PATH="$before_ld" timeout "$(cap 120)" python3 bench/peers/mla.py --tool "$BEFORE/attnkit" --no-peer \
      --shapes "decode h16 128x8192" "decode h128 128x8192" "verify2 h128 64x8192" "decode h16 128x8192 fp8" \
      --json "$res/mla-before.json" --markdown "$res/mla-before.md" >"$res/mla-before.log" 2>&1
    cat "$res/mla-before.md" 2>/dev/null
  fi
  step "jit's latent kernels"
  timeout "$(cap 150)" python3 bench/peers/mla.py --tool "$tool" --backend jit --no-peer \
    --shapes "decode h16 128x8192" "decode h128 128x8192" "extend h128 1x4096" \
    --json "$res/jit-latent.json" --markdown "$res/jit-latent.md" >"$res/jit-latent.log" 2>&1
  cat "$res/jit-latent.md" 2>/dev/null
}

section_plan() {
  step "plan time"
  (cd bench/peers && timeout "$(cap 100)" python3 plan_time.py --tool "$root/$tool" --json "$res/plan_time.json" \
    --processes 3 --mla) >"$res/plan_time.md" 2>&1
  tail -12 "$res/plan_time.md"
}

section_hopper() {
  local shapes=("prefill causal 1x8192 page 64" "prefill full 1x8192 page 64" "prefill causal 1x16384 page 64"
    "prefill full 1x16384 page 64" "prefill varlen causal 4x4096 page 64" "prefill varlen full 4x4096 page 64"
    "chunked prefill 2048 on 30720 page 64" "prefill full 1x8192 d64 page 64" "prefill full 1x8192 d256 page 64"
    "prefill azure 16 prompts page 64" "prefill causal 1x18774 page 64" "prefill causal 1x8192" "prefill full 1x8192")
  step "hopper and planned"
  timeout "$(cap 200)" python3 bench/run_attnkit.py --tool "$tool" --json "$res/hopper.json" --ceilings --max-seconds 3 \
    --backends hopper planned --shapes "${shapes[@]}" >"$res/hopper.log" 2>&1
  step "hopper's fp8 products"
  timeout "$(cap 60)" python3 bench/run_attnkit.py --tool "$tool" --json "$res/hopper-fp8.json" --max-seconds 3 \
    --backends hopper --shapes "prefill full 1x8192 page 64 e4m3 cache" "prefill full 1x8192 page 64" \
    --bench-args="--hopper-fp8-products" >"$res/hopper-fp8.log" 2>&1
  step "FlashInfer sm90 and cuDNN"
  timeout "$(cap 200)" python3 bench/peers/run_peers.py --json "$res/hopper-peers.json" --no-ceilings --flex-shapes \
    --shapes "${shapes[@]}" --peers flashinfer-prefill-ragged-fa3 flashinfer-prefill-paged-fa3 sdpa-cudnn \
    >"$res/hopper-peers.log" 2>&1
  python3 bench/summarize.py --attnkit "$res/hopper.json" --peers "$res/hopper-peers.json" --markdown "$res/hopper.md" \
    --backend hopper --against planned flashinfer-prefill-ragged-fa3 flashinfer-prefill-paged-fa3 sdpa-cudnn
}

section_jit() {
  local shapes=("decode 64x16384" "decode 16x8192" "decode 1x32768" "prefill causal 1x8192" "prefill full 1x8192"
    "chunked prefill 2048 on 30720" "decode 16x8192 alibi" "prefill causal 1x8192 alibi"
    "prefill causal 1x8192 softcap 30" "prefill document 4x2048 in 8192")
  local flex=("decode 16x8192" "prefill causal 1x8192" "decode 16x8192 alibi" "prefill causal 1x8192 alibi"
    "prefill causal 1x8192 softcap 30" "prefill document 4x2048 in 8192")
  step "jit and planned"
  timeout "$(cap 150)" python3 bench/run_attnkit.py --tool "$tool" --json "$res/jit.json" --max-seconds 3 \
    --backends jit planned --shapes "${shapes[@]}" >"$res/jit.log" 2>&1
  if [[ -n "${BEFORE:-}" ]]; then
    step "jit, the build before"
    LD_LIBRARY_PATH="$before_ld" timeout "$(cap 60)" python3 bench/run_attnkit.py --tool "$BEFORE/attnkit" \
      --json "$res/jit-before.json" --max-seconds 3 --backends jit --shapes "decode 1x32768" "decode 16x8192" \
      >"$res/jit-before.log" 2>&1
  fi
  step "SGLang's Triton kernels and FlexAttention"
  timeout "$(cap 220)" python3 bench/peers/run_peers.py --json "$res/jit-peers.json" --no-ceilings --shapes "${shapes[@]}" \
    --peers sglang-triton-decode sglang-triton-extend flex --flex-shapes "${flex[@]}" >"$res/jit-peers.log" 2>&1
  python3 bench/summarize.py --attnkit "$res/jit.json" --peers "$res/jit-peers.json" --markdown "$res/jit.md" \
    --backend jit --against planned sglang-triton-decode sglang-triton-extend flex
}

section_jitfirst() {
  local cache args
  step "jit's first calls"
  for args in "--phase decode --batch 16 --kv-len 8192" "--phase prefill --batch 1 --kv-len 8192"; do
    cache=$(mktemp -d)
    # shellcheck disable=SC2086 # args is a list of options
    ATTNKIT_CACHE_DIR="$cache" timeout "$(cap 60)" "$tool" bench --backend jit $args --jit-first-calls --max-seconds 2 \
      2>&1 | tee -a "$res/jit-first.log" | tail -6
    rm -rf "$cache"
  done
  step "warmup --preset llama3-8b --tune, into an empty cache"
  cache=$(mktemp -d)
  local t0=$SECONDS
  ATTNKIT_CACHE_DIR="$cache" timeout "$(cap 100)" "$tool" warmup --preset llama3-8b --tune >"$res/warmup.log" 2>&1
  echo "warmup: exit $?, $((SECONDS - t0)) s"
  rm -rf "$cache"
  step "jit head dims, prefill causal 1 x 8192"
  for hd in 128 96 192/128; do
    timeout "$(cap 60)" "$tool" bench --backend jit --phase prefill --batch 1 --kv-len 8192 --head-dim "$hd" --max-seconds 3 \
      2>&1 | tee -a "$res/jit-head-dims.log" | tail -3
  done
}

section_replay() {
  step "replay: Mooncake, ${REPLAY_REQUESTS:-200} requests"
  timeout "$(cap 420)" "$tool" replay --trace data/traces/mooncake_fast25_conversation_first400.jsonl \
    --backend planned --prefill-backend hopper --decode-backend planned --max-requests "${REPLAY_REQUESTS:-200}" \
    --max-context 16384 --json "$res/replay.json" --no-progress >"$res/replay.log" 2>&1
  tail -25 "$res/replay.log"
}

section_profile() {
  step "Nsight Compute: hopper's extend kernel and FlashInfer's sm90 kernel"
  BACKEND=hopper ATTNKIT_KERNEL=extend_kernel PROFILE_PEER=flashinfer-prefill-ragged-fa3 OUT="$res/profile" \
    timeout "$(cap 150)" scripts/device-profile.sh "prefill causal 1x8192 page 64" >"$res/profile.log" 2>&1
  tail -5 "$res/profile.log"
}

# Nsight Compute with the sections mlaprofile and jitprofile read: throughput, pipes, memory, issue
# and stalls (clocks left as the benchmarks run them).
ncu_args=(ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis
  --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy)

section_mlaprofile() {
  # Where the 64-row kernel's time goes beside FlashInfer's.
  local bench=("$tool" bench --backend mla --preset deepseek-v3 --page-size 64 --warmup 2 --repeats 2)
  step "Nsight Compute: mla's 64-row kernel, 128 heads, 128 x 8192"
  timeout "$(cap 90)" "${ncu_args[@]}" -k regex:attend_kernel -s 2 -c 1 "${bench[@]}" --heads 128 \
    --requests 8191+1x128 >"$res/mla-profile-64row.txt" 2>&1
  grep -vE "^==PROF==|^\s*$" "$res/mla-profile-64row.txt" | head -80
  step "Nsight Compute: FlashInfer's MLA kernel, the same batch"
  timeout "$(cap 120)" "${ncu_args[@]}" -k regex:MLA -s 3 -c 1 --target-processes all python3 bench/peers/mla.py \
    --tool "$tool" --shapes "decode h128 128x8192" --json "$res/mla-profile-peer.json" \
    --markdown "$res/mla-profile-peer.md" >"$res/mla-profile-peer.txt" 2>&1
  grep -vE "^==PROF==|^\s*$" "$res/mla-profile-peer.txt" | grep -v "^\[" | head -80
  step "Nsight Compute: mla's narrow kernel, 16 heads, 128 x 8192, fp8_blocked"
  timeout "$(cap 90)" "${ncu_args[@]}" -k regex:narrow_kernel -s 2 -c 1 "${bench[@]}" --heads 16 \
    --requests 8191+1x128 --kv-dtype e4m3 --latent fp8-blocked >"$res/mla-profile-narrow-fp8.txt" 2>&1
  grep -vE "^==PROF==|^\s*$" "$res/mla-profile-narrow-fp8.txt" | head -80
}

section_jitprofile() {
  local shape
  # Tuned first, without the profiler: the profiled calls then load the chosen tile from the disk
  # cache instead of launching every candidate (all named `attend`).
  step "jit: tuning the profiled shapes"
  local -a shape_args
  for shape in "prefill document 4x2048 in 8192" "prefill causal 1x8192"; do
    # The shape's options as the shell would split them (a mask expression is one quoted word).
    eval "shape_args=($(python3 bench/peers/shapes.py bench-args "$shape"))"
    timeout "$(cap 60)" "$tool" bench --backend jit "${shape_args[@]}" --max-seconds 1 >/dev/null 2>&1
  done
  timeout "$(cap 60)" "$tool" bench --backend jit --phase prefill --batch 1 --kv-len 8192 --head-dim 96 --max-seconds 1 \
    >/dev/null 2>&1
  step "Nsight Compute: jit's prefill kernel and FlexAttention's, document mask and plain causal"
  BACKEND=jit ATTNKIT_KERNEL='^attend$' PROFILE_PEER=flex PEER_KERNEL=triton OUT="$res/jitprofile" \
    timeout "$(cap 200)" scripts/device-profile.sh "prefill document 4x2048 in 8192" "prefill causal 1x8192" \
    >"$res/jitprofile.log" 2>&1
  tail -5 "$res/jitprofile.log"
  step "Nsight Compute: jit's prefill kernel at d96"
  timeout "$(cap 90)" "${ncu_args[@]}" -k 'regex:^attend$' -s 4 -c 1 "$tool" bench --backend jit \
    --phase prefill --batch 1 --kv-len 8192 --head-dim 96 --warmup 3 --repeats 2 >"$res/jitprofile-d96.txt" 2>&1
  grep -vE "^==PROF==|^\s*$" "$res/jitprofile-d96.txt" | head -60
}

for s in "$@"; do
  declare -F "section_$s" >/dev/null || { echo "device-speed: no section $s"; continue; }
  if (($(date +%s) - start > limit - 20)); then
    echo "device-speed: no time left for $s"
    continue
  fi
  "section_$s"
done
