// What the `planned` scheduler's tests share: batches and shapes by hand, a plan run into a poisoned
// staging buffer, and the check of every invariant a decode plan must keep.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "backends/planned/plan.h"

namespace attnkit::planned::plan_testing {

// A batch by hand: (kv_len, qo_len) per request, pages 0, 1, 2, ... in order.
ForwardBatch make_batch(const std::vector<std::pair<int, int>>& reqs, int page_size);

PlanShape shape(int qo_heads, int kv_heads, int num_ctas, int head_dim = 128);

struct Planned {
  PlanCapacity cap;
  PlanLayout layout;
  std::vector<std::byte> staging;
  DecodePlanView view;
  DecodePlanStats stats;
};

// plan_decode of one window variant into a staging buffer poisoned first.
Planned run_plan(const ForwardBatch& b, const PlanShape& s, int window_left);

// Checks every invariant of one decode plan (gtest assertions).
void check_plan(const ForwardBatch& b, const PlanShape& s, int window_left, const Planned& p);

}  // namespace attnkit::planned::plan_testing
