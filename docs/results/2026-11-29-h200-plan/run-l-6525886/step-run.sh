#!/usr/bin/env bash
# Device run: every GPU test of dist/, attnkit check, plan time (with the next-step column), then
# decode A/B of dist-b (before) against dist (after).
root=$PWD
out=${OUT:-$root/out}
cublas=$(scripts/cuda-lib-dirs.sh)
for t in planned_step_tests planned_decode_tests planned_graph_tests planned_plan_tests planned_prefill_tests conformance_tests serving_tests core_tests; do
  LD_LIBRARY_PATH=$root/dist/lib:$cublas dist/tests/$t --gtest_color=no > "$out/$t.log" 2>&1
  echo "$t: $(grep -E '^\[  (PASSED|FAILED)' "$out/$t.log" | tr '\n' ' ')"
done
LD_LIBRARY_PATH=$root/dist/lib:$cublas dist/attnkit check --backend planned 2>&1 | tail -1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/site/flashinfer/data/aot && tar -xJf .whl/flashinfer-aot.tar.xz -C /tmp/site/flashinfer/data/aot
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
for r in 1 2 3; do
  (cd bench/peers && LD_LIBRARY_PATH=$root/dist/lib:$cublas python3 plan_time.py --tool "$root/dist/attnkit" --json "$out/pt_$r.json") 2>&1 | grep -E "^\| 256"
done
LD_LIBRARY_PATH=$root/dist/lib:$cublas dist/bench/planned_plan_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_filter='BM_PlanDecode/256|Validate|Write|Upload' 2>&1 | grep median | awk '{print $1, $2}'
BENCH_MAX_SECONDS=4 scripts/device-ab.sh dist-b dist 2 2>&1 | tail -12
