// The `cpu` plan: the split rule's worked examples, which kernel each batch gets, and that the
// units cover every (row, visible key) exactly once, longest first.
#include <gtest/gtest.h>

#include <map>

#include "backends/cpu/plan.h"

namespace attnkit::cpu {
namespace {

ForwardBatch make_batch(std::vector<std::pair<int, int>> requests, int page_size = 16) {
  KvCacheConfig c;
  c.num_pages = 0;
  for (auto [p, n] : requests) c.num_pages += (p + n + page_size - 1) / page_size;
  c.page_size = page_size;
  c.num_kv_heads = 8;
  c.head_dim_k = c.head_dim_v = 128;
  KvCache cache(c);
  std::vector<RequestStep> steps;
  for (auto [p, n] : requests) steps.push_back({.prefix_len = p, .num_new_tokens = n, .custom_mask = {}});
  return build_batch(cache, steps);
}

PlanShape llama3_8b() { return {false, 32, 8, 128, 128, true, -1}; }

TEST(CpuPlan, SplitRuleWorkedExamples) {
  EXPECT_EQ(choose_kv_chunk({32768}, 64), 512);
  EXPECT_EQ(choose_kv_chunk(std::vector<int>(8, 4096), 64), 512);
  EXPECT_EQ(choose_kv_chunk(std::vector<int>(64, 4096), 64), 0);  // enough units already
  EXPECT_EQ(choose_kv_chunk({100}, 64), 0);                        // shorter than one chunk
  EXPECT_EQ(choose_kv_chunk({1000}, 64), 256);                     // never below the minimum chunk
}

TEST(CpuPlan, DecodeUsesTheHeadsKernelAndSplitsLongHistories) {
  const Plan plan = make_plan(make_batch({{32767, 1}}), llama3_8b(), 16);
  EXPECT_EQ(plan.kernel, KernelKind::heads);
  EXPECT_EQ(plan.kv_chunk, 512);
  EXPECT_EQ(plan.units.size(), 64u);
  EXPECT_EQ(plan.partial_rows, 64 * 32);
  // The merge in slices of 8 of the 32 heads, each over all 64 parts, together every row once.
  ASSERT_EQ(plan.merges.size(), 4u);
  for (size_t i = 0; i < plan.merges.size(); ++i) {
    const MergeGroup& g = plan.merges[i];
    EXPECT_EQ(g.num_parts, 64);
    EXPECT_EQ(g.part_stride_rows, 32);
    EXPECT_EQ(g.rows.row_begin, static_cast<int>(8 * i));
    EXPECT_EQ(g.rows.row_end, static_cast<int>(8 * i + 8));
    EXPECT_EQ(g.first_partial_row, static_cast<int64_t>(8 * i));
    EXPECT_EQ(g.rows.kv_begin, 0);
    EXPECT_EQ(g.rows.kv_end, 32768);
  }
}

TEST(CpuPlan, ManyRequestsAreNotSplit) {
  std::vector<std::pair<int, int>> requests(64, {4095, 1});
  const Plan plan = make_plan(make_batch(requests), llama3_8b(), 16);
  EXPECT_EQ(plan.kv_chunk, 0);
  EXPECT_TRUE(plan.merges.empty());
  EXPECT_EQ(plan.units.size(), 64u);
}

TEST(CpuPlan, ExtendMlaAndOddDimsUseTheRowsKernel) {
  EXPECT_EQ(make_plan(make_batch({{10, 5}}), llama3_8b(), 16).kernel, KernelKind::rows);
  PlanShape mla{true, 16, 1, 576, 512, true, -1};
  EXPECT_EQ(make_plan(make_batch({{10, 1}}), mla, 16).kernel, KernelKind::rows);
  PlanShape odd{false, 4, 2, 72, 72, true, -1};
  EXPECT_EQ(make_plan(make_batch({{10, 1}}), odd, 16).kernel, KernelKind::rows);
}

// Every (request, kv head, row) sees exactly its visible keys, once, across direct units and parts.
TEST(CpuPlan, UnitsCoverEveryRowAndVisibleKeyOnce) {
  PlanShape shape = llama3_8b();
  shape.window_left = 300;
  const ForwardBatch batch = make_batch({{0, 100}, {2000, 7}, {50, 1}});
  const Plan plan = make_plan(batch, shape, 16);
  std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> ranges;  // (request, head, row) -> key ranges
  for (size_t i = 0; i < plan.units.size(); ++i) {
    const UnitWork& w = plan.units[i].work;
    if (i > 0) {
      EXPECT_GE(plan.units[i - 1].cost, plan.units[i].cost) << "not longest first";
    }
    for (int r = w.row_begin; r < w.row_end; ++r) ranges[{w.request_idx, w.kv_head, r}].push_back({w.kv_begin, w.kv_end});
  }
  for (int i = 0; i < batch.batch_size(); ++i) {
    for (int kv_head = 0; kv_head < 8; ++kv_head) {
      for (int r = 0; r < batch.qo_len(i) * 4; ++r) {
        auto found = ranges[{i, kv_head, r}];
        ASSERT_FALSE(found.empty()) << "request " << i << " head " << kv_head << " row " << r << " has no unit";
        std::sort(found.begin(), found.end());
        const int pos = batch.prefix_lens[i] + r / 4;
        EXPECT_LE(found.front().first, std::max(0, pos - 300));
        EXPECT_GE(found.back().second, pos + 1);
        for (size_t k = 1; k < found.size(); ++k) EXPECT_EQ(found[k - 1].second, found[k].first) << "gap or overlap";
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::cpu
