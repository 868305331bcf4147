#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: one planned decode per shape with ATTNKIT_DECODE_TIMELINE set, and the
# per-CTA timeline of each read back by decode-timeline.py (CSV files in $OUT, or ./out).
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
cublas_dirs=$(python3 -c 'import nvidia, os; print(":".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)
export LD_LIBRARY_PATH="$root/$dist/lib${cublas_dirs:+:$cublas_dirs}"
python3 - "$shapes_arg" <<'PY' | while IFS='|' read -r name args; do
import sys
sys.path.insert(0, "bench/peers")
import shapes
wanted = [n for n in sys.argv[1].split(";") if n]
for s in shapes.SHAPES:
    if s.phase != "decode" or (wanted and s.name not in wanted):
        continue
    reqs = {}
    for p, n in s.requests:
        reqs[(p, n)] = reqs.get((p, n), 0) + 1
    print(s.name + "|--phase decode --requests " + ",".join(f"{p}+{n}x{c}" for (p, n), c in reqs.items()))
PY
  tag=$(tr ' +' '__' <<<"$name")
  # shellcheck disable=SC2086 # args is a list of options
  ATTNKIT_DECODE_TIMELINE="$out/timeline.$tag.csv" "$dist/attnkit" bench --backend planned --preset llama3-8b \
    --page-size 16 $args --warmup 3 --repeats 3 >/dev/null 2>&1 || echo "$name: bench FAILED"
  echo "=== $name"
  python3 scripts/decode-timeline.py "$out/timeline.$tag.csv"
done
