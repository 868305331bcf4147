// The `mla` scheduler on the host: row tiles, KV ranges under the causal and window cuts, splits
// that cover each range exactly once, one wave's worth of work a split.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "backends/mla/config.h"
#include "backends/mla/plan.h"

namespace attnkit::mla {
namespace {

// A batch of (prefix, new tokens) requests over pages of `page_size`, pages numbered in order.
ForwardBatch make_batch(const std::vector<std::pair<int, int>>& requests, int page_size = 64) {
  ForwardBatch b;
  b.page_size = page_size;
  b.qo_indptr = {0};
  b.kv_page_indptr = {0};
  int page = 0;
  for (auto [prefix, n] : requests) {
    const int kv = prefix + n;
    const int pages = (kv + page_size - 1) / page_size;
    b.qo_indptr.push_back(b.qo_indptr.back() + n);
    b.kv_page_indptr.push_back(b.kv_page_indptr.back() + pages);
    for (int p = 0; p < pages; ++p) b.kv_page_indices.push_back(page++);
    b.kv_last_page_len.push_back(kv == 0 ? 0 : (kv - 1) % page_size + 1);
    b.prefix_lens.push_back(prefix);
  }
  return b;
}

// The row tile names the kernel: 16 rows where no request has more (the narrow kernel), else 64
// on a bf16 cache and 32 on an fp8_blocked one; the rows are cut by it.
TEST(MlaPlan, TheRowTileFollowsTheWidestRequestAndTheCache) {
  EXPECT_EQ(tile_rows_for(16, false), 16);
  EXPECT_EQ(tile_rows_for(32, false), 64);
  EXPECT_EQ(tile_rows_for(32, true), 32);
  EXPECT_EQ(tile_rows_for(128, false), 64);
  const PlanShape h16{.num_qo_heads = 16, .causal = true, .window_left = -1, .num_ctas = 1};
  EXPECT_EQ(make_plan(make_batch({{100, 1}, {7, 1}}), h16).tile_rows, 16);
  const Plan verify = make_plan(make_batch({{100, 2}, {7, 1}}), h16);
  EXPECT_EQ(verify.tile_rows, 64);
  ASSERT_EQ(verify.work.size(), 2u);
  PlanShape fp8 = h16;
  fp8.fp8_latent = true;
  const Plan extend = make_plan(make_batch({{0, 5}}), fp8);  // 80 rows: 32 + 32 + 16
  EXPECT_EQ(extend.tile_rows, 32);
  ASSERT_EQ(extend.work.size(), 3u);
  int rows = 0;
  for (const WorkItem& w : extend.work) rows += w.rows;
  EXPECT_EQ(rows, 80);
}

// With one CTA no range is split (a split would only add its merge).
TEST(MlaPlan, DecodeRowTilesOfSixteenHeadsAreOneTileARequest) {
  const ForwardBatch b = make_batch({{4095, 1}, {99, 1}});
  const Plan plan = make_plan(b, {.num_qo_heads = 16, .causal = true, .window_left = -1, .num_ctas = 1});
  ASSERT_EQ(plan.work.size(), 2u);
  EXPECT_TRUE(plan.merges.empty());
  EXPECT_EQ(plan.work[0].rows, 16);
  EXPECT_EQ(plan.work[0].kv_hi, 4096);
  EXPECT_EQ(plan.work[0].num_tiles, 64);
  EXPECT_EQ(plan.work[1].q_row0, 16);
  EXPECT_EQ(plan.work[1].kv_hi, 100);
  EXPECT_EQ(plan.work[1].num_tiles, 2);
  EXPECT_EQ(plan.total_tiles, 66);
}

TEST(MlaPlan, OneHundredTwentyEightHeadsTakeTwoRowTilesAToken) {
  const ForwardBatch b = make_batch({{500, 2}});
  const Plan plan = make_plan(b, {.num_qo_heads = 128, .causal = true, .window_left = -1, .num_ctas = 1});
  ASSERT_EQ(plan.work.size(), 4u);
  std::map<int, int> kv_hi_by_row;
  for (const WorkItem& w : plan.work) kv_hi_by_row[w.t_row0] = w.kv_hi;
  // Rows 0..127 are token 0 (position 500), rows 128..255 token 1 (position 501).
  EXPECT_EQ(kv_hi_by_row[0], 501);
  EXPECT_EQ(kv_hi_by_row[64], 501);
  EXPECT_EQ(kv_hi_by_row[128], 502);
  EXPECT_EQ(kv_hi_by_row[192], 502);
}

TEST(MlaPlan, WindowStartsTheRangeAndTilesAlignDown) {
  const ForwardBatch b = make_batch({{1000, 1}});
  const Plan plan = make_plan(b, {.num_qo_heads = 16, .causal = true, .window_left = 100, .num_ctas = 1});
  ASSERT_EQ(plan.work.size(), 1u);
  EXPECT_EQ(plan.work[0].kv_lo, 900);
  EXPECT_EQ(plan.work[0].n0, 896);
  EXPECT_EQ(plan.work[0].num_tiles, 2);  // 896..1023 covers 900..1000
}

TEST(MlaPlan, SplitsCoverEachRangeOnceAndFillOneWave) {
  const ForwardBatch b = make_batch({{32767, 1}, {255, 1}, {16383, 1}});
  const int ctas = 132;
  const Plan plan = make_plan(b, {.num_qo_heads = 16, .causal = true, .window_left = -1, .num_ctas = ctas});
  int64_t covered = 0;
  int max_tiles = 0;
  for (const WorkItem& w : plan.work) {
    covered += w.num_tiles;
    max_tiles = std::max(max_tiles, w.num_tiles);
    EXPECT_GE(w.kv_lo, w.n0);
    EXPECT_LE(w.kv_hi, w.n0 + w.num_tiles * kTileTokens);
  }
  EXPECT_EQ(covered, plan.total_tiles);
  EXPECT_LE(max_tiles, std::max<int64_t>(2, (plan.total_tiles + ctas - 1) / ctas));
  // Every split's partial slot is joined by exactly one merge.
  std::vector<int> joined(static_cast<size_t>(plan.num_partials), 0);
  for (const MergeItem& m : plan.merges)
    for (int s = 0; s < m.num_splits; ++s) ++joined[static_cast<size_t>(m.first_partial + s)];
  for (int j : joined) EXPECT_EQ(j, 1);
  // Longest first; equal lengths in plan order (request, row tile, then piece).
  for (size_t i = 1; i < plan.work.size(); ++i) {
    const WorkItem& a = plan.work[i - 1];
    const WorkItem& c = plan.work[i];
    EXPECT_GE(a.num_tiles, c.num_tiles);
    if (a.num_tiles == c.num_tiles) EXPECT_TRUE(a.q_row0 < c.q_row0 || (a.q_row0 == c.q_row0 && a.n0 < c.n0)) << i;
  }
}

TEST(MlaPlan, ExtendRowsSeeTheirOwnCausalRange) {
  const ForwardBatch b = make_batch({{0, 8}});  // 8 tokens x 16 heads = 128 rows: two row tiles
  const Plan plan = make_plan(b, {.num_qo_heads = 16, .causal = true, .window_left = -1, .num_ctas = 1});
  ASSERT_EQ(plan.work.size(), 2u);
  for (const WorkItem& w : plan.work) EXPECT_EQ(w.kv_hi, w.t_row0 == 0 ? 4 : 8);
}

}  // namespace
}  // namespace attnkit::mla
