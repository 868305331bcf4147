#!/usr/bin/env bash
# Runs ON THE GPU MACHINE: times two builds of attnkit on the same shapes, alternating A B A B ...
# so that clock and power drift fall on both, and prints each shape's median per build and B / A.
#
#   scripts/device-ab.sh DIST_A DIST_B [ROUNDS] [--shapes "NAME;NAME"] [--backend NAME]
#
# DIST_A and DIST_B are folders staged like dist/ (attnkit and lib/libattnkit.so; build-for-device.sh
# makes one). Shapes are bench/peers/shapes.py names (default: every decode shape). JSON per round and
# the table go to ./out (or the folder the variable OUT names). AB_TESTS="x_tests y_tests": run those test executables of
# DIST_A/tests first with DIST_B's library (a B that keeps A's interface is then tested too).
# AB_ENV_A / AB_ENV_B: environment assignments for one side's runs, AB_BENCH_ARGS_A / AB_BENCH_ARGS_B
# more `attnkit bench` options for them (one build, two settings: DIST_A and DIST_B may then be the
# same folder; e.g. AB_BENCH_ARGS_B="--hopper-kv-load gather").
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"
mkdir -p "$out"
[[ $# -ge 2 ]] || { sed -n 2,13p "$0"; exit 2; }
dist_a="$1" dist_b="$2"
shift 2
rounds=3
if [[ $# -gt 0 && "$1" != --* ]]; then rounds="$1"; shift; fi
shapes_arg="" backend=planned
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) shapes_arg="$2"; shift ;;
    --backend) backend="$2"; shift ;;
    *) echo "device-ab: unknown option $1"; exit 2 ;;
  esac
  shift
done
[[ -z "$shapes_arg" ]] && shapes_arg=$(python3 bench/peers/shapes.py names decode | paste -sd';')
IFS=';' read -r -a shapes <<<"$shapes_arg"

cublas_dirs=$(scripts/cuda-lib-dirs.sh)
# A folder holding only the library finds the rest (Highway, Google Benchmark) in dist/lib.
lib_path() { echo "$root/$1/lib:$root/dist/lib${cublas_dirs:+:$cublas_dirs}"; }

for t in ${AB_TESTS:-}; do
  if LD_LIBRARY_PATH="$(lib_path "$dist_b")" "$dist_a/tests/$t" --gtest_color=no \
      >"$out/ab-tests.$t.log" 2>&1; then
    echo "device-ab: $t with $dist_b's library: $(grep -E '^\[  PASSED' "$out/ab-tests.$t.log")"
  else
    echo "device-ab: $t with $dist_b's library FAILED:"; grep -E '^\[  FAILED|Failure' "$out/ab-tests.$t.log" | head -20
  fi
done

for ((r = 0; r < rounds; ++r)); do
  for side in a b; do
    dist=$dist_a side_env=${AB_ENV_A:-} side_args=${AB_BENCH_ARGS_A:-}
    [[ $side == b ]] && dist=$dist_b side_env=${AB_ENV_B:-} side_args=${AB_BENCH_ARGS_B:-}
    # The build's own library first: LD_LIBRARY_PATH outranks the binaries' RUNPATH.
    env $side_env LD_LIBRARY_PATH="$(lib_path "$dist")" \
      python3 bench/run_attnkit.py --tool "$dist/attnkit" --json "$out/ab-$side-$r.json" \
      --backends "$backend" --shapes "${shapes[@]}" --max-seconds "${BENCH_MAX_SECONDS:-5}" \
      --bench-args="$side_args" >/dev/null ||
      echo "device-ab: $dist round $r FAILED"
  done
done

python3 - "$out" "$rounds" "$dist_a" "$dist_b" <<'EOF' | tee "$out/ab.md"
import json, statistics, sys
out, rounds, name_a, name_b = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
fig = {}
for side in "ab":
    for r in range(rounds):
        try:
            rep = json.load(open(f"{out}/ab-{side}-{r}.json"))
        except OSError:
            continue
        for row in rep["results"]:
            if "value" in row:
                fig.setdefault(row["shape"], {}).setdefault(side, []).append(row["value"])
print(f"| shape | {name_a} | {name_b} | B / A | rounds |")
print("|---|---|---|---|---|")
for shape, v in fig.items():
    a, b = statistics.median(v.get("a", [0])), statistics.median(v.get("b", [0]))
    spread = lambda xs: f"{min(xs):.3f}-{max(xs):.3f}" if xs else "-"
    ratio = f"{b / a:.3f}" if a else "-"
    print(f"| {shape} | {a:.3f} ({spread(v.get('a', []))}) | {b:.3f} ({spread(v.get('b', []))}) | {ratio} | {len(v.get('a', []))} |")
EOF
