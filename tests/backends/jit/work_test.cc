// How the mma_tile kernel's work is cut (work.h), without a GPU: every packed row of every request
// in exactly one block, each block's KV range the keys its rows can see, the splits of a block
// covering that range once in whole tiles, partial rows allocated without overlap, longest first.
#include "backends/jit/work.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace attnkit::jit {
namespace {

void check_plan(const std::vector<WorkRequest>& reqs, const WorkShape& shape, const WorkPlan& plan) {
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> ranges;  // (request, row0) -> KV ranges
  int prev_len = 1 << 30;
  int64_t tiles = 0;
  std::vector<bool> partial_used(static_cast<size_t>(plan.partial_rows), false);
  for (int i = 0; i < plan.num_items(); ++i) {
    const int32_t* it = &plan.items[static_cast<size_t>(i) * WorkPlan::kStride];
    EXPECT_LE(it[3] - it[2], prev_len) << "items are ordered longest first";
    EXPECT_EQ(it[5], tiles) << "each item's tile-mask entries follow the last's";
    tiles += (it[3] - it[2] + shape.block_n - 1) / shape.block_n;
    prev_len = it[3] - it[2];
    EXPECT_GE(it[2], 0);
    EXPECT_LE(it[3], reqs[it[0]].prefix + reqs[it[0]].q_len);
    ranges[{it[0], it[1]}].push_back({it[2], it[3]});
    if (it[4] >= 0) {
      for (int r = 0; r < shape.block_m; ++r) {
        EXPECT_FALSE(partial_used[static_cast<size_t>(it[4] + r)]) << "partial row " << it[4] + r << " twice";
        partial_used[static_cast<size_t>(it[4] + r)] = true;
      }
    }
  }
  for (size_t r = 0; r < reqs.size(); ++r) {
    const int rows = reqs[r].q_len * shape.group, kv_len = reqs[r].prefix + reqs[r].q_len;
    for (int row0 = 0; row0 < rows; row0 += shape.block_m) {
      auto& got = ranges[{static_cast<int>(r), row0}];
      ASSERT_FALSE(got.empty()) << "request " << r << " rows from " << row0 << " have no item";
      std::sort(got.begin(), got.end());
      const int first = reqs[r].prefix + row0 / shape.group;
      const int last = reqs[r].prefix + (std::min(rows, row0 + shape.block_m) - 1) / shape.group;
      const int lo = shape.window_left >= 0 ? std::max(0, first - shape.window_left) : 0;
      const int hi = shape.causal ? last + 1 : kv_len;
      EXPECT_EQ(got.front().first, lo);
      EXPECT_EQ(got.back().second, hi);
      for (size_t s = 1; s < got.size(); ++s) {
        EXPECT_EQ(got[s].first, got[s - 1].second) << "splits meet";
        EXPECT_EQ((got[s].first - lo) % shape.block_n, 0) << "splits start on whole tiles";
      }
    }
  }
  EXPECT_EQ(tiles, plan.tiles);
  int merged_rows = 0;
  for (int m = 0; m < plan.num_merges(); ++m) merged_rows += plan.merges[static_cast<size_t>(m) * WorkPlan::kStride + 3];
  EXPECT_EQ(merged_rows * shape.block_m, plan.partial_rows);
}

TEST(JitWork, DecodeSplitsLongRequestsToFillTheGpu) {
  WorkShape shape{.group = 4, .block_m = 16, .block_n = 64, .causal = true, .num_kv_heads = 8, .target_ctas = 132};
  const std::vector<WorkRequest> reqs = {{32767, 1}};
  const WorkPlan plan = plan_work(reqs, shape);
  EXPECT_GT(plan.num_items() * shape.num_kv_heads, 100);  // one request alone would be 8 CTAs
  EXPECT_EQ(plan.num_merges(), 1);
  check_plan(reqs, shape, plan);
}

// Splits round up a block at a time: they are lengthened until the CTAs fit one wave, never more
// than the GPU holds at once (16 x 8192 on 264 slots: 2 splits a request, 256 CTAs; 3 would be 384).
TEST(JitWork, SplitsFitOneWave) {
  WorkShape shape{.group = 4, .block_m = 16, .block_n = 64, .causal = true, .num_kv_heads = 8, .target_ctas = 264};
  const std::vector<WorkRequest> reqs(16, WorkRequest{8191, 1});
  const WorkPlan plan = plan_work(reqs, shape);
  EXPECT_LE(plan.num_items() * shape.num_kv_heads, shape.target_ctas);
  EXPECT_GT(plan.num_items() * shape.num_kv_heads, shape.target_ctas / 2);
  EXPECT_EQ(plan.num_merges(), 16);
  check_plan(reqs, shape, plan);
}

TEST(JitWork, ABusyGpuIsNotSplit) {
  WorkShape shape{.group = 4, .block_m = 16, .block_n = 64, .causal = true, .num_kv_heads = 8, .target_ctas = 132};
  const std::vector<WorkRequest> reqs(64, WorkRequest{4095, 1});
  const WorkPlan plan = plan_work(reqs, shape);
  EXPECT_EQ(plan.num_items(), 64);
  EXPECT_EQ(plan.num_merges(), 0);
  EXPECT_EQ(plan.partial_rows, 0);
  check_plan(reqs, shape, plan);
}

TEST(JitWork, CausalPrefillBlocksSeeOnlyTheirPast) {
  WorkShape shape{.group = 4, .block_m = 64, .block_n = 64, .causal = true, .num_kv_heads = 8, .target_ctas = 264};
  const std::vector<WorkRequest> reqs = {{0, 1000}, {300, 77}, {5, 1}};
  check_plan(reqs, shape, plan_work(reqs, shape));
}

TEST(JitWork, WindowAndFullAttentionAndGroupsThatDoNotDivideTheBlock) {
  for (bool causal : {true, false}) {
    for (int window : {-1, 0, 100}) {
      for (int group : {1, 3, 7, 16}) {
        WorkShape shape{.group = group, .block_m = 32, .block_n = 32, .causal = causal, .window_left = window,
                        .num_kv_heads = 2, .target_ctas = 500};
        const std::vector<WorkRequest> reqs = {{2000, 3}, {0, 40}, {129, 1}, {0, 1}};
        SCOPED_TRACE(::testing::Message() << "causal " << causal << " window " << window << " group " << group);
        check_plan(reqs, shape, plan_work(reqs, shape));
      }
    }
  }
}

TEST(JitWork, EmptyBatch) {
  const WorkPlan plan = plan_work({}, WorkShape{});
  EXPECT_EQ(plan.num_items(), 0);
  EXPECT_EQ(plan.num_merges(), 0);
}

}  // namespace
}  // namespace attnkit::jit
