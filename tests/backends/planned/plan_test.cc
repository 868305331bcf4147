// The `planned` host scheduler, without a GPU: every decode unit's visible KV covered exactly once,
// CTAs balanced, no chunk past the share, the merge list consistent (plan_testing.h checks
// each plan), the window and the output's size honoured.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/planned/plan.h"
#include "backends/planned/plan_testing.h"

namespace attnkit::planned {
namespace {

using namespace plan_testing;

TEST(PlannedPlan, OneLongAndThirtyShortRequestsSplitTheLongOne) {
  std::vector<std::pair<int, int>> reqs = {{8192, 1}};
  for (int i = 0; i < 30; ++i) reqs.push_back({128, 1});
  const ForwardBatch b = make_batch(reqs, 16);
  const PlanShape s = shape(32, 8, 264);
  const Planned p = run_plan(b, s, -1);
  check_plan(b, s, -1, p);
  // 8 units of 8192 against a share of about 425 positions: each is cut (into more chunks than
  // one join round takes, so each is joined in two levels), short ones never are.
  int outputs = 0;
  for (int m = 0; m < p.stats.num_merges; ++m) outputs += p.view.merges[m].next_merge < 0;
  EXPECT_EQ(outputs, 8);
  EXPECT_GT(p.stats.num_merges, 8);
  EXPECT_GT(p.stats.num_items, 8 * 10);
}

// One KV head, one long request: hundreds of chunks of one split, joined in two levels whose last
// merge has more groups than one round of loads takes.
TEST(PlannedPlan, OneKvHeadLongRequestJoinsInTwoLevels) {
  const ForwardBatch b = make_batch({{60000, 1}}, 16);
  const PlanShape s = shape(8, 1, 396);
  const Planned p = run_plan(b, s, -1);
  check_plan(b, s, -1, p);
  int outputs = 0, widest = 0;
  for (int m = 0; m < p.stats.num_merges; ++m) {
    if (p.view.merges[m].next_merge >= 0) continue;
    ++outputs;
    widest = std::max(widest, p.view.merges[m].num_partials);
  }
  EXPECT_EQ(outputs, 1);
  EXPECT_GT(widest, kJoinFanIn);
}

TEST(PlannedPlan, UniformLongBatchNeedsFewSplits) {
  const ForwardBatch b = make_batch(std::vector<std::pair<int, int>>(64, {16384, 1}), 16);
  const PlanShape s = shape(32, 8, 264);
  const Planned p = run_plan(b, s, -1);
  check_plan(b, s, -1, p);
  EXPECT_LT(p.stats.num_merges, s.num_ctas);
}

TEST(PlannedPlan, SingleLongRequestSpreadsOverTheGrid) {
  const ForwardBatch b = make_batch({{32768, 1}}, 16);
  const PlanShape s = shape(32, 8, 264);
  const Planned p = run_plan(b, s, -1);
  check_plan(b, s, -1, p);
  int busy = 0;
  for (int c = 0; c < s.num_ctas; ++c) busy += p.view.cta_item_indptr[c + 1] > p.view.cta_item_indptr[c];
  EXPECT_GE(busy, s.num_ctas - 8) << "most CTAs must get a chunk of the one request";
}

TEST(PlannedPlan, SkewedBatch) {
  std::vector<std::pair<int, int>> reqs;
  for (int i = 0; i < 64; ++i) reqs.push_back({i % 2 == 0 ? 128 : 8192, 1});
  const ForwardBatch b = make_batch(reqs, 16);
  const PlanShape s = shape(32, 8, 264);
  check_plan(b, s, -1, run_plan(b, s, -1));
}

// The H200's decode benchmark shapes (llama3-8b heads, 132 SMs x 3 CTAs): long histories cut so
// finely that the busiest CTA is within 4% of the mean, unit ends included.
TEST(PlannedPlan, BenchmarkShapesBalanceWithinFourPercent) {
  const PlanShape s = shape(32, 8, 396);
  std::vector<std::pair<std::string, std::vector<std::pair<int, int>>>> batches = {
      {"1 x 32768", {{32768, 1}}},
      {"16 x 8192", std::vector<std::pair<int, int>>(16, {8192, 1})},
      {"64 x 4096", std::vector<std::pair<int, int>>(64, {4096, 1})},
      {"64 x 16384", std::vector<std::pair<int, int>>(64, {16384, 1})},
      {"128 x 8192", std::vector<std::pair<int, int>>(128, {8192, 1})},
      {"32 x 128 + 32 x 8192", {}}};
  for (int i = 0; i < 64; ++i) batches.back().second.push_back({i % 2 == 0 ? 128 : 8192, 1});
  for (const auto& [name, reqs] : batches) {
    SCOPED_TRACE(name);
    const ForwardBatch b = make_batch(reqs, 16);
    const Planned p = run_plan(b, s, -1);
    check_plan(b, s, -1, p);
    EXPECT_LE(static_cast<double>(p.stats.max_cta_cost) * s.num_ctas, 1.04 * static_cast<double>(p.stats.total_cost));
  }
}

// The decode grid gives up at most 2% of the SMs' slots for more shares of the KV heads.
TEST(PlannedPlan, DecodeGridTrimsToShares) {
  EXPECT_EQ(decode_grid_ctas(396, 8), 392);   // 8 shares of 1 head
  EXPECT_EQ(decode_grid_ctas(396, 32), 392);  // 384 (32 shares) or 384 (16) would idle 3%: 8 shares
  EXPECT_EQ(decode_grid_ctas(396, 1), 396);
  EXPECT_EQ(decode_grid_ctas(396, 3), 396);   // 3 divides 396 already
  EXPECT_EQ(decode_grid_ctas(132, 8), 132);   // 128 would idle 3%; gcd 4 is what is left
  EXPECT_EQ(decode_grid_ctas(264, 8), 264);
  EXPECT_EQ(decode_grid_ctas(5, 4), 5);       // a grid too small to trim keeps its slots
  EXPECT_EQ(plan_head_reps(shape(32, 8, decode_grid_ctas(396, 8))), 8);
}

// The grid runs one share's plan over every share of the KV heads: the share is the largest that
// divides both the heads and the CTAs, and its plan balances the benchmark shapes as well.
TEST(PlannedPlan, ShareOfTheKvHeadsDividesHeadsAndCtas) {
  EXPECT_EQ(plan_head_reps(shape(32, 8, 396)), 4);
  EXPECT_EQ(plan_head_reps(shape(32, 8, 264)), 8);
  EXPECT_EQ(plan_head_reps(shape(32, 1, 396)), 1);
  EXPECT_EQ(plan_head_reps(shape(64, 32, 132)), 4);
  const PlanShape share = share_shape(shape(32, 8, 396), 4);
  EXPECT_EQ(share.num_qo_heads, 8);
  EXPECT_EQ(share.num_kv_heads, 2);
  EXPECT_EQ(share.num_ctas, 99);
  EXPECT_EQ(share.group_size(), 4);
  EXPECT_EQ(share.head_dim, 128);
  try {
    share_shape(shape(32, 8, 396), 8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "planned plan: 8 shares must divide num_kv_heads (8) and num_ctas (396)");
  }
  for (const auto& reqs : {std::vector<std::pair<int, int>>{{32768, 1}}, std::vector<std::pair<int, int>>(128, {8192, 1}),
                           std::vector<std::pair<int, int>>(16, {8192, 1})}) {
    const ForwardBatch b = make_batch(reqs, 16);
    const Planned p = run_plan(b, share, -1);
    check_plan(b, share, -1, p);
    EXPECT_LE(static_cast<double>(p.stats.max_cta_cost) * share.num_ctas, 1.04 * static_cast<double>(p.stats.total_cost));
  }
}

TEST(PlannedPlan, RandomBatchesShapesAndWindows) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 256)(rng);
    std::vector<std::pair<int, int>> reqs;
    for (int i = 0; i < n; ++i) {
      const int kv = std::uniform_int_distribution<int>(1, trial % 2 ? 20000 : 600)(rng);
      const int qo = std::min(kv, std::uniform_int_distribution<int>(0, 9)(rng) < 8 ? 1 : 5);
      reqs.push_back({kv, qo});
    }
    const int page = std::vector<int>{1, 16, 256}[static_cast<size_t>(trial % 3)];
    const ForwardBatch b = make_batch(reqs, page);
    const int kv_heads = std::vector<int>{1, 2, 8}[static_cast<size_t>(trial % 3)];
    const int group = std::vector<int>{1, 4, 8, 24, 32}[static_cast<size_t>(trial % 5)];
    const int ctas = std::vector<int>{1, 7, 132, 264}[static_cast<size_t>(trial % 4)];
    const int window = trial % 4 == 1 ? std::uniform_int_distribution<int>(0, 300)(rng) : -1;
    PlanShape s = shape(group * kv_heads, kv_heads, ctas);
    s.all_wait_joins = trial % 2 == 1;
    SCOPED_TRACE("trial " + std::to_string(trial));
    check_plan(b, s, window, run_plan(b, s, window));
  }
}

// One request over one share's CTAs (llama3-8b heads on 392 CTAs: 8 shares of one KV head on 49):
// where the plan allows it, its one wide split is joined by all its CTAs in one level; a short
// batch after it leaves the long request's last chunk on a CTA with more items, which only counts.
TEST(PlannedPlan, WideSplitJoinedByAllItsCtas) {
  for (const bool more : {false, true}) {
    std::vector<std::pair<int, int>> reqs = {{32768, 1}};
    if (more) reqs.insert(reqs.end(), 8, {300, 1});
    const ForwardBatch b = make_batch(reqs, 16);
    PlanShape s = shape(4, 1, 49);
    s.all_wait_joins = true;
    const Planned p = run_plan(b, s, -1);
    SCOPED_TRACE(more ? "with short requests" : "alone");
    check_plan(b, s, -1, p);
    ASSERT_GE(p.stats.num_merges, 1);
    const DecodeMergeItem& m = p.view.merges[0];
    EXPECT_EQ(m.all_wait, 1);
    EXPECT_EQ(m.next_merge, -1);
    EXPECT_GT(m.num_partials, 40) << "the split spreads over most of the 49 CTAs";
    EXPECT_EQ(p.stats.num_partials, m.num_partials) << "no group partials";
    s.all_wait_joins = false;
    const Planned two = run_plan(b, s, -1);
    check_plan(b, s, -1, two);
    EXPECT_EQ(two.view.merges[0].all_wait, 0);
    EXPECT_EQ(two.view.merges[0].next_merge, two.stats.num_merges - 1) << "two levels without it";
  }
}

TEST(PlannedPlan, OneCtaTakesEverythingUnsplit) {
  const ForwardBatch b = make_batch({{5000, 1}, {3, 1}, {0, 0}, {700, 1}}, 16);
  const PlanShape s = shape(8, 2, 1);
  const Planned p = run_plan(b, s, -1);
  check_plan(b, s, -1, p);
  EXPECT_EQ(p.stats.num_merges, 0);
  EXPECT_EQ(p.stats.num_items, 3 * 2);
}

TEST(PlannedPlan, WindowTrimsTheHistory) {
  const ForwardBatch b = make_batch({{1000, 1}}, 16);
  const PlanShape s = shape(4, 1, 1);
  const Planned p = run_plan(b, s, 99);
  ASSERT_EQ(p.stats.num_items, 1);
  EXPECT_EQ(p.view.items[0].kv_begin, 1000 - 1 - 99);
  EXPECT_EQ(p.view.items[0].kv_end, 1000);
}

TEST(PlannedPlan, TooSmallOutputIsAnError) {
  const ForwardBatch b = make_batch({{100, 1}, {100, 1}}, 16);
  const PlanShape s = shape(4, 1, 4);
  PlanCapacity cap = capacity_for(b, s);
  cap.decode_items = 1;
  const PlanLayout layout = make_layout(cap, s, 1);
  std::vector<std::byte> staging(layout.total_bytes);
  try {
    plan_decode(b, s, -1, decode_view(layout, cap, s, 0, staging.data()));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "planned plan: more than 1 decode items (the bound for this batch)");
  }
}

}  // namespace
}  // namespace attnkit::planned
