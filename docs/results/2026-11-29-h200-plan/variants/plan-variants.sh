#!/usr/bin/env bash
# Device run: init_forward_metadata time of four builds alternated, round by round.
root=$PWD
out=${OUT:-$root/out}
cublas=$(scripts/cuda-lib-dirs.sh)
cd bench/peers
for r in 1 2 3 4; do
  for v in A v1 v2 v3; do
    if [[ $v == A ]]; then tool=$root/dist-b/attnkit; lib=$root/dist-b/lib; else tool=$root/dist-v/attnkit; lib=$root/dist-v/$v:$root/dist-v; fi
    LD_LIBRARY_PATH=$lib:$cublas python3 -c "
from plan_time import kv_lens, attnkit_plan_us
print('$v', $r, ' '.join('%.1f' % attnkit_plan_us('$tool', kv_lens(m)) for m in (4096, 16384)))
" 2>&1 | tee -a "$out/variants.txt"
  done
done
