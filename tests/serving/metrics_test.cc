// Percentiles as numpy interpolates them, and the summary: throughput over the makespan, TPOT only
// over multi-token outputs, scheduler overhead overall and at large batches.
#include <gtest/gtest.h>

#include "serving/metrics.h"

namespace attnkit::serving {
namespace {

TEST(Metrics, PercentilesInterpolateLikeNumpy) {
  const Percentiles p = percentiles({4.0, 1.0, 3.0, 2.0});
  EXPECT_DOUBLE_EQ(p.p50, 2.5);
  EXPECT_DOUBLE_EQ(p.p90, 3.7);
  EXPECT_DOUBLE_EQ(p.p99, 3.97);
  EXPECT_DOUBLE_EQ(p.mean, 2.5);
  EXPECT_DOUBLE_EQ(p.max, 4.0);
  const Percentiles none = percentiles({});
  EXPECT_EQ(none.p50, 0.0);
  EXPECT_EQ(none.max, 0.0);
}

TEST(Metrics, Summary) {
  std::vector<RequestRecord> requests = {
      {.arrival_s = 0.0, .ttft_s = 0.5, .queue_s = 0.2, .tpot_s = 0.1, .e2e_s = 1.5, .prompt_len = 10, .output_len = 11, .num_preemptions = 0},
      {.arrival_s = 1.0, .ttft_s = 1.0, .queue_s = 0.0, .tpot_s = 0.0, .e2e_s = 1.0, .prompt_len = 20, .output_len = 1, .num_preemptions = 1}};
  std::vector<StepRecord> steps(2);
  steps[0].batch_size = 300;
  steps[0].step_ms = 10.0f;
  steps[0].attn_ms = 4.0f;
  steps[0].sched_ms = 0.1f;
  steps[1].batch_size = 2;
  steps[1].step_ms = 10.0f;
  steps[1].attn_ms = 6.0f;
  steps[1].sched_ms = 0.3f;
  const Summary s = summarize(steps, requests, {0.1f, 0.2f}, 1000.0, 10.0);
  EXPECT_EQ(s.output_tokens, 12);
  EXPECT_DOUBLE_EQ(s.makespan_s, 2.0);  // the second request finishes at 1 + 1
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 6.0);
  EXPECT_DOUBLE_EQ(s.tpot_s.p50, 0.1);  // one-token outputs have no TPOT
  EXPECT_NEAR(s.attn_fraction, 0.5, 1e-6);
  EXPECT_NEAR(s.sched_fraction, 0.02, 1e-6);
  EXPECT_EQ(s.large_steps, 1);
  EXPECT_NEAR(s.sched_fraction_large, 0.01, 1e-6);
  EXPECT_EQ(s.max_batch_size, 300);
  EXPECT_DOUBLE_EQ(s.peak_kv_bytes, 1000.0);
  // The TTFT split: 0.2 / 0.0 s waiting, 0.3 / 1.0 s from admission to the first token.
  EXPECT_DOUBLE_EQ(s.queue_s.max, 0.2);
  EXPECT_DOUBLE_EQ(s.admitted_ttft_s.p50, 0.65);
  EXPECT_DOUBLE_EQ(s.admitted_ttft_s.max, 1.0);
}

}  // namespace
}  // namespace attnkit::serving
