// `attnkit replay` over a context-parallel group in this process: every checked step of 2 and 3
// ranks, both share layouts, equals `reference` over the unsharded history; every request finishes,
// no rank leaks a page, each rank's peak stays within its cache; what cannot run as a rank is
// refused by name.
#include <gtest/gtest.h>

#include "attnkit/error.h"
#include "attnkit/registry.h"
#include "serving/replay.h"
#include "serving/replay_json.h"
#include "serving/tiny_model.h"

namespace attnkit::serving {
namespace {

using testing::has_backend;
using testing::tiny_trace;

ReplayOptions cp_options(const std::string& backend, int ranks, ShareKind share) {
  ReplayOptions o;
  o.backend = backend;
  o.model = testing::tiny_model(2);
  o.page_size = 4;
  o.dtype = DType::f32;
  o.kv_dtype = DType::f32;
  o.kv_pages = 40;  // a rank's: small enough that the group must preempt
  o.scheduler = {.max_batch_size = 32, .token_budget = 128, .watermark_pages = 1};
  o.verify = true;
  o.verify_every = 5;
  o.verify_max = 24;
  o.cp_ranks = ranks;
  o.cp_share = share;
  o.cp_pages_per_run = 2;
  return o;
}

TEST(ReplayContextParallel, EveryCheckedStepMatchesTheUnshardedReference) {
  const Trace t = tiny_trace(1000, 3);
  int64_t outputs = 0;
  for (const TraceRequest& q : t.requests) outputs += q.output_len;
  for (const std::string backend : {"reference", "cpu"}) {
    if (!has_backend(backend)) continue;
    for (const ShareKind share : {ShareKind::interleaved, ShareKind::contiguous}) {
      for (const int ranks : {2, 3}) {
        SCOPED_TRACE(backend + ", " + std::to_string(ranks) + " ranks, " +
                     (share == ShareKind::interleaved ? "interleaved" : "contiguous"));
        const ReplayResult r = run_replay(t, cp_options(backend, ranks, share));  // throws on a leak or a loss
        ASSERT_TRUE(r.skipped.empty()) << r.skipped;
        EXPECT_EQ(r.cp_ranks, ranks);
        EXPECT_EQ(r.summary.num_requests, 1000);
        EXPECT_EQ(r.summary.output_tokens, outputs);
        EXPECT_GT(r.num_preemptions, 0);
        EXPECT_GE(r.verified.size(), 12u);
        for (const VerifyRecord& v : r.verified) EXPECT_TRUE(v.passed) << v.message;
        ASSERT_EQ(r.rank_peak_kv_bytes.size(), static_cast<size_t>(ranks));
        double together = 0.0;
        for (const double bytes : r.rank_peak_kv_bytes) {
          EXPECT_GT(bytes, 0.0);
          EXPECT_LE(bytes, r.kv_capacity_bytes);
          together += bytes;
        }
        EXPECT_GE(together, r.summary.peak_kv_bytes);  // each rank's peak, at whatever step it came
        const nlohmann::json j = run_json(r);
        EXPECT_EQ(j["config"]["cp_ranks"], ranks);
        EXPECT_EQ(j["rank_peak_kv_bytes"].size(), static_cast<size_t>(ranks));
      }
    }
  }
}

// --cp 1 is the plain run: one cache, no group.
TEST(ReplayContextParallel, OneRankIsThePlainRun) {
  const Trace t = tiny_trace(60, 9);
  ReplayOptions o = cp_options("reference", 1, ShareKind::interleaved);
  const ReplayResult r = run_replay(t, o);
  EXPECT_EQ(r.cp_ranks, 1);
  EXPECT_TRUE(r.rank_peak_kv_bytes.empty());
}

TEST(ReplayContextParallel, WhatCannotRunAsARankIsRefused) {
  const Trace t = tiny_trace(8, 1);
  ReplayOptions pair = cp_options("", 2, ShareKind::interleaved);
  pair.prefill_backend = "reference";
  pair.decode_backend = "reference";
  try {
    run_replay(t, pair);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "replay --cp: each rank runs one backend; a prefill/decode pair is not served");
  }
  if (has_backend("cuda-naive")) {  // a GPU backend without the LSE: skipped, saying why
    const ReplayResult r = run_replay(t, cp_options("cuda-naive", 2, ShareKind::interleaved));
    EXPECT_FALSE(r.skipped.empty());
  }
  ReplayOptions window = cp_options("reference", 2, ShareKind::interleaved);
  for (AttentionSpec& s : window.model.layers) s.window_left = 8;
  try {
    run_replay(t, window);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("window"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnkit::serving
