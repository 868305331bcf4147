// The planner's step bookkeeping (StepTracker): which batches may keep the last plan. Host-only.
#include <gtest/gtest.h>

#include "attnkit/kv_cache.h"
#include "backends/planned/planner.h"

namespace attnkit::planned {
namespace {

struct Steps {
  KvCache cache{KvCacheConfig{.num_layers = 1, .num_pages = 64, .page_size = 16, .num_kv_heads = 2,
                              .head_dim_k = 64, .head_dim_v = 64}};
  std::vector<RequestId> ids;

  ForwardBatch first(std::initializer_list<int64_t> prefixes) {
    std::vector<RequestStep> steps;
    for (int64_t p : prefixes) steps.push_back({.id = -1, .prefix_len = p, .num_new_tokens = 1, .custom_mask = {}});
    ForwardBatch b = build_batch(cache, steps);
    ids = b.request_ids;
    return b;
  }
  // Every request one token longer.
  ForwardBatch next() {
    std::vector<RequestStep> steps;
    for (RequestId id : ids) steps.push_back({.id = id, .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}});
    return build_batch(cache, steps);
  }
};

// Two plan buffers: only their addresses are compared.
int kBufferA = 0, kBufferB = 1;

TEST(StepTracker, TheNextStepKeepsThePlanUntilItsStepsAreUsed) {
  Steps s;
  StepTracker t(/*steppable=*/true);
  const ForwardBatch b0 = s.first({100, 300});
  ASSERT_TRUE(t.can_step(b0));
  t.planned_full(b0, /*max_steps=*/2, &kBufferA, 1);
  EXPECT_EQ(t.steps(), 0);
  const ForwardBatch b1 = s.next();
  ASSERT_TRUE(t.is_next_step(b1, &kBufferA, 1));
  EXPECT_FALSE(t.is_next_step(b1, &kBufferB, 1)) << "another buffer holds no plan to keep";
  EXPECT_FALSE(t.is_next_step(b1, &kBufferA, 2)) << "the buffer was reallocated since";
  EXPECT_FALSE(t.is_next_step(b0, &kBufferA, 1)) << "the same lengths are not the next step";
  t.planned_step(b1, &kBufferA, 1);
  const ForwardBatch b2 = s.next();
  ASSERT_TRUE(t.is_next_step(b2, &kBufferA, 1));
  t.planned_step(b2, &kBufferA, 1);
  EXPECT_EQ(t.steps(), 2);
  EXPECT_FALSE(t.is_next_step(s.next(), &kBufferA, 1)) << "two steps were allowed";
}

TEST(StepTracker, AForgottenOrUnsteppablePlanIsNeverKept) {
  Steps s;
  StepTracker t(true);
  const ForwardBatch b0 = s.first({50});
  t.planned_full(b0, 4, &kBufferA, 1);
  t.forget();
  EXPECT_FALSE(t.is_next_step(s.next(), &kBufferA, 1));

  StepTracker windowed(/*steppable=*/false);
  EXPECT_FALSE(windowed.can_step(b0));
  windowed.planned_full(b0, 4, &kBufferA, 1);
  EXPECT_FALSE(windowed.is_next_step(s.next(), &kBufferA, 1));
}

TEST(StepTracker, ExtendBatchesAreNotSteps) {
  Steps s;
  StepTracker t(true);
  const ForwardBatch extend = build_batch(s.cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 8, .custom_mask = {}}});
  EXPECT_FALSE(t.can_step(extend));
  t.planned_full(extend, 4, &kBufferA, 1);
  EXPECT_EQ(t.steps(), 0);
}

}  // namespace
}  // namespace attnkit::planned
