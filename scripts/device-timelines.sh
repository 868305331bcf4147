#!/usr/bin/env bash
# Runs on the GPU machine: one planned decode per shape with --decode-timeline, and the
# per-CTA timeline of each read back by decode-timeline.py (CSV files in ./out, or the folder the variable OUT names).
#
#   scripts/device-timelines.sh [DIST] [--shapes "NAME;NAME"]     (default: dist, every decode shape)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"
mkdir -p "$out"
dist=dist
if [[ $# -gt 0 && "$1" != --* ]]; then dist="$1"; shift; fi
shapes_arg=""
[[ "${1:-}" == --shapes ]] && shapes_arg="$2"
cublas_dirs=$(scripts/cuda-lib-dirs.sh)
export LD_LIBRARY_PATH="$root/$dist/lib${cublas_dirs:+:$cublas_dirs}"
if [[ -n "$shapes_arg" ]]; then names=$(tr ';' '\n' <<<"$shapes_arg"); else names=$(python3 bench/peers/shapes.py names decode); fi
while IFS= read -r name; do
  [[ -z "$name" ]] && continue
  args=$(python3 bench/peers/shapes.py bench-args "$name") || { echo "unknown shape: $name"; continue; }
  tag=$(tr ' +' '__' <<<"$name")
  # shellcheck disable=SC2086 # args is a list of options
  "$dist/attnkit" bench --backend planned --preset llama3-8b --decode-timeline "$out/timeline.$tag.csv" \
    $args --warmup 3 --repeats 3 >/dev/null 2>&1 || echo "$name: bench FAILED"
  echo "=== $name"
  [[ -f "$out/timeline.$tag.csv" ]] || { echo "no timeline written (no GPU, or the planned backend skipped)"; continue; }
  python3 scripts/decode-timeline.py "$out/timeline.$tag.csv"
done <<<"$names"
