// The `cpu` backend's check cases against `reference`, shared by its tests: sized so the plan
// splits KV (one long decode: chunks of 256), spans several 64-row blocks and 64-key tiles, and
// masks tiles partially, over every cache dtype, GQA group, MLA and logit transform it runs.
#pragma once

#include <vector>

#include "harness/check.h"

namespace attnkit::cpu_test {

std::vector<harness::CheckCase> cpu_cases();

// A few small cases over the same kernels and dtypes (one split decode), for every target where
// the CPU is emulated (scripts/test-arm.sh: qemu-aarch64 runs the kernels about 500 times slower).
std::vector<harness::CheckCase> cpu_small_cases();

}  // namespace attnkit::cpu_test
