// The `cpu` backend's check cases against `reference`, shared by its tests: sized so the plan
// splits KV (one long decode: chunks of 256), spans several 64-row blocks and 64-key tiles, and
// masks tiles partially, over every cache dtype, GQA group, MLA and logit transform it runs.
#pragma once

#include <vector>

#include "harness/check.h"

namespace attnkit::cpu_test {

std::vector<harness::CheckCase> cpu_cases();

}  // namespace attnkit::cpu_test
