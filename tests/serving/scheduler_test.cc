// The scheduler alone over a KvCache (no attention): every request finishes with exactly its
// tokens, steps respect the batch and token limits, prompts are chunked, a full cache preempts,
// and no page is left allocated — over 10,000 requests.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "attnkit/error.h"
#include "serving/scheduler.h"

namespace attnkit::serving {
namespace {

KvCacheConfig tiny_cache(int num_pages, int page_size) {
  KvCacheConfig c;
  c.num_layers = 1;
  c.num_pages = num_pages;
  c.page_size = page_size;
  c.num_kv_heads = 1;
  c.head_dim_k = 4;
  c.head_dim_v = 4;
  c.dtype = DType::f32;
  return c;
}

Trace random_trace(int n, uint64_t seed, int max_prompt, int max_output, double rate) {
  Trace t;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> prompt(1, max_prompt), output(1, max_output);
  std::exponential_distribution<double> gap(rate);
  double now = 0.0;
  for (int i = 0; i < n; ++i) {
    t.requests.push_back({.id = i, .arrival_s = now, .prompt_len = prompt(rng), .output_len = output(rng), .hash_ids = {}});
    now += gap(rng);
  }
  return t;
}

struct Totals {
  int64_t steps = 0;
  int64_t tokens = 0;
};

// Runs the scheduler to the end with each step taking `step_s`; checks the limits on every step.
Totals drive(Scheduler& s, const SchedulerConfig& cfg, double step_s) {
  Totals tot;
  double now = 0.0;
  while (!s.done()) {
    auto st = s.schedule(now);
    if (!st) {
      now = s.next_arrival_s();
      continue;
    }
    EXPECT_LE(st->batch.batch_size(), cfg.max_batch_size);
    EXPECT_LE(st->batch.num_tokens(), cfg.token_budget);
    EXPECT_EQ(st->batch.batch_size(), st->num_decode + st->num_prefill);
    now += step_s;
    s.complete(*st, now);
    ++tot.steps;
    tot.tokens += st->batch.num_tokens();
  }
  return tot;
}

TEST(Scheduler, TenThousandRequestsAllFinishNoPageLeaks) {
  const Trace t = random_trace(10000, 7, 64, 32, 2000.0);
  // 48 pages of 16: far fewer than the requests want at once, so preemption happens.
  KvCache cache(tiny_cache(48, 16));
  CachePagePool pool(cache);
  SchedulerConfig cfg{.max_batch_size = 64, .token_budget = 256, .watermark_pages = 1};
  Scheduler s(t, pool, cfg);
  const Totals tot = drive(s, cfg, 1e-3);
  EXPECT_NO_THROW(s.check_drained());
  EXPECT_GT(s.num_preemptions(), 0);
  EXPECT_LE(s.peak_pages(), 48);
  int64_t expected_tokens = 0;
  for (const Sequence& q : s.sequences()) {
    EXPECT_EQ(q.generated, q.request->output_len);
    EXPECT_GE(q.first_token_s, q.request->arrival_s);
    EXPECT_GE(q.finish_s, q.first_token_s);
    // A prompt (and the outputs before a preemption) computed once more per preemption.
    expected_tokens += q.request->prompt_len + q.request->output_len - 1;
  }
  EXPECT_GE(tot.tokens, expected_tokens);
  EXPECT_EQ(cache.allocator().num_free(), 48);
}

TEST(Scheduler, ExactTokensWithoutPreemption) {
  const Trace t = random_trace(500, 3, 40, 20, 100.0);
  KvCache cache(tiny_cache(4096, 8));
  CachePagePool pool(cache);
  SchedulerConfig cfg{.max_batch_size = 32, .token_budget = 64, .watermark_pages = 0};
  Scheduler s(t, pool, cfg);
  const Totals tot = drive(s, cfg, 1e-3);
  s.check_drained();
  EXPECT_EQ(s.num_preemptions(), 0);
  int64_t expected = 0, gaps = 0;
  for (const Sequence& q : s.sequences()) {
    expected += q.request->prompt_len + q.request->output_len - 1;  // the last output is never fed back
    gaps += q.request->output_len - 1;
  }
  EXPECT_EQ(tot.tokens, expected);
  EXPECT_EQ(static_cast<int64_t>(s.inter_token_s().size()), gaps);
}

TEST(Scheduler, LongPromptIsChunkedUnderTheBudget) {
  Trace t;
  t.requests.push_back({.id = 0, .arrival_s = 0.0, .prompt_len = 1000, .output_len = 3, .hash_ids = {}});
  KvCache cache(tiny_cache(512, 16));
  CachePagePool pool(cache);
  SchedulerConfig cfg{.max_batch_size = 4, .token_budget = 300, .watermark_pages = 1};
  Scheduler s(t, pool, cfg);
  std::vector<int> chunk_sizes;
  double now = 0.0;
  while (!s.done()) {
    auto st = s.schedule(now);
    ASSERT_TRUE(st.has_value());
    chunk_sizes.push_back(st->batch.num_tokens());
    now += 0.01;
    s.complete(*st, now);
  }
  EXPECT_EQ(chunk_sizes, (std::vector<int>{300, 300, 300, 100, 1, 1}));
  EXPECT_NEAR(s.sequences()[0].first_token_s, 0.04, 1e-12);  // after the last chunk
  s.check_drained();
}

TEST(Scheduler, IdleUntilTheNextArrival) {
  Trace t;
  t.requests.push_back({.id = 0, .arrival_s = 5.0, .prompt_len = 4, .output_len = 2, .hash_ids = {}});
  KvCache cache(tiny_cache(16, 4));
  CachePagePool pool(cache);
  Scheduler s(t, pool, SchedulerConfig{.max_batch_size = 1, .token_budget = 8, .watermark_pages = 1});
  EXPECT_FALSE(s.schedule(0.0).has_value());
  EXPECT_DOUBLE_EQ(s.next_arrival_s(), 5.0);
  EXPECT_TRUE(s.schedule(5.0).has_value());
}

TEST(Scheduler, RefusesARequestTheCacheCannotHold) {
  Trace t;
  t.requests.push_back({.id = 0, .arrival_s = 0.0, .prompt_len = 100, .output_len = 30, .hash_ids = {}});
  KvCache cache(tiny_cache(8, 16));
  CachePagePool pool(cache);
  try {
    Scheduler s(t, pool, SchedulerConfig{.max_batch_size = 4, .token_budget = 64, .watermark_pages = 1});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 0 grows to 129 tokens (9 pages)"), std::string::npos) << e.what();
  }
}

TEST(Scheduler, PromptsRunWholeWithoutChunkedPrefill) {
  Trace t;
  t.requests.push_back({.id = 0, .arrival_s = 0.0, .prompt_len = 10, .output_len = 3, .hash_ids = {}});
  t.requests.push_back({.id = 1, .arrival_s = 0.0, .prompt_len = 250, .output_len = 2, .hash_ids = {}});
  KvCache cache(tiny_cache(512, 16));
  CachePagePool pool(cache);
  SchedulerConfig cfg{.max_batch_size = 4, .token_budget = 256, .watermark_pages = 1, .chunked_prefill = false};
  Scheduler s(t, pool, cfg);
  std::vector<int> tokens;
  double now = 0.0;
  while (!s.done()) {
    auto st = s.schedule(now);
    ASSERT_TRUE(st.has_value());
    for (int i = 0; i < st->batch.batch_size(); ++i) {
      if (st->batch.qo_len(i) > 1) {
        EXPECT_EQ(st->batch.prefix_lens[i], 0) << "a prompt was cut";
      }
    }
    tokens.push_back(st->batch.num_tokens());
    now += 0.01;
    s.complete(*st, now);
  }
  // Request 1's 250 tokens do not fit beside request 0's 10 in 256: it waits a step, then runs whole.
  EXPECT_EQ(tokens, (std::vector<int>{10, 251, 2}));
  s.check_drained();
}

TEST(Scheduler, WithoutChunkedPrefillARequestMustFitTheBudget) {
  Trace t;
  t.requests.push_back({.id = 0, .arrival_s = 0.0, .prompt_len = 100, .output_len = 30, .hash_ids = {}});
  KvCache cache(tiny_cache(64, 16));
  CachePagePool pool(cache);
  try {
    Scheduler s(t, pool, SchedulerConfig{.max_batch_size = 4, .token_budget = 64, .chunked_prefill = false});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 0 grows to 129 tokens, more than the token budget (64)"),
              std::string::npos)
        << e.what();
  }
}

// A sharded pool counts a request's growth on the rank that gives most of it.
TEST(ShardedPagePool, CountsTheBusiestRanksPages) {
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<KvCache*> ptrs;
  for (int r = 0; r < 3; ++r) {
    caches.push_back(std::make_unique<KvCache>(tiny_cache(10, 4)));
    ptrs.push_back(caches.back().get());
  }
  const ShardedPagePool interleaved(ptrs, {.kind = ShareKind::interleaved, .num_ranks = 3, .rank_num_pages = 10});
  EXPECT_EQ(interleaved.pages_needed(0, 1), 1);
  EXPECT_EQ(interleaved.pages_needed(0, 12), 1);   // pages 0, 1, 2: one a rank
  EXPECT_EQ(interleaved.pages_needed(0, 13), 2);   // page 3 is rank 0's second
  EXPECT_EQ(interleaved.pages_needed(12, 1), 1);   // page 3
  EXPECT_EQ(interleaved.pages_needed(13, 3), 0);   // still page 3
  const ShardedPagePool runs(ptrs, {.kind = ShareKind::contiguous, .num_ranks = 3, .pages_per_run = 2,
                                    .rank_num_pages = 10});
  EXPECT_EQ(runs.pages_needed(0, 12), 2);  // pages 0, 1 on rank 0, page 2 on rank 1
  EXPECT_EQ(runs.capacity(), 10);
  EXPECT_EQ(runs.num_free(), 10);
}

TEST(Scheduler, ShardedPoolsFinishEveryRequestWithoutLeaks) {
  const Trace t = random_trace(3000, 11, 64, 32, 2000.0);
  for (const ShareKind kind : {ShareKind::interleaved, ShareKind::contiguous}) {
    for (const int ranks : {2, 3}) {
      std::vector<std::unique_ptr<KvCache>> caches;
      std::vector<KvCache*> ptrs;
      for (int r = 0; r < ranks; ++r) {
        caches.push_back(std::make_unique<KvCache>(tiny_cache(24, 16)));
        caches.back()->allocator().shuffle(static_cast<uint64_t>(r) + 5);
        ptrs.push_back(caches.back().get());
      }
      ShardedPagePool pool(ptrs, {.kind = kind, .num_ranks = ranks, .pages_per_run = 2, .rank_num_pages = 24});
      SchedulerConfig cfg{.max_batch_size = 64, .token_budget = 256, .watermark_pages = 1};
      Scheduler s(t, pool, cfg);
      drive(s, cfg, 1e-3);  // build_batch would throw if a rank ran out of pages
      EXPECT_NO_THROW(s.check_drained());
      EXPECT_GT(s.num_preemptions(), 0) << "the pools are meant to fill";
      for (int peak : pool.peak_pages_per_rank()) EXPECT_LE(peak, 24);
      for (const auto& c : caches) EXPECT_EQ(c->allocator().num_free(), 24);
    }
  }
}

}  // namespace
}  // namespace attnkit::serving
