// The `planned` plan beyond one decode batch, without a GPU: the next decode steps' plans derived
// from a full one, the upload buffer's layout, and the extend kernel's work list.
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

// The plan the decode kernel reads for the next decode step when the backend keeps the last one
// (decode_copy.cuh's load_item): prev's items with each unit's new-key chunk one position longer
// and every page-table offset the longer batch's; the same CTA lists and merges.
Planned next_step_plan(const Planned& prev, const ForwardBatch& b, const PlanShape& s) {
  Planned next = prev;
  next.view = decode_view(next.layout, next.cap, s, 0, next.staging.data());
  next.stats.total_cost = next.stats.max_cta_cost = 0;
  for (int c = 0; c < s.num_ctas; ++c) {
    int64_t load = 0;
    for (int i = next.view.cta_item_indptr[c]; i < next.view.cta_item_indptr[c + 1]; ++i) {
      DecodeWorkItem& it = next.view.items[i];
      it.kv_end += it.owns_new_key;
      it.page_begin = b.kv_page_indptr[it.request_idx];
      load += it.kv_end - it.kv_begin + kItemCost;
    }
    next.stats.total_cost += load;
    next.stats.max_cta_cost = std::max(next.stats.max_cta_cost, load);
  }
  return next;
}

// The next decode steps' plans, derived from a full one: every invariant of a full plan holds for
// the longer batch, the chunks stay where they were but for each unit's last one (one position
// longer), and page-table offsets follow requests that gained a page.
TEST(PlannedPlan, StepPlansFollowTheLongerBatch) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 24; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 200)(rng);
    std::vector<std::pair<int, int>> reqs;
    for (int i = 0; i < n; ++i) reqs.push_back({std::uniform_int_distribution<int>(1, trial % 2 ? 9000 : 300)(rng), 1});
    const int page = std::vector<int>{1, 16, 64}[static_cast<size_t>(trial % 3)];
    const int kv_heads = std::vector<int>{1, 2, 8}[static_cast<size_t>(trial % 3)];
    const int group = std::vector<int>{1, 4, 8, 32}[static_cast<size_t>(trial % 4)];
    const PlanShape s = shape(group * kv_heads, kv_heads, std::vector<int>{1, 7, 132, 396}[static_cast<size_t>(trial % 4)]);
    SCOPED_TRACE("trial " + std::to_string(trial));
    Planned prev = run_plan(make_batch(reqs, page), s, -1);
    EXPECT_GE(max_steps_between_plans(s, prev.view, prev.stats), 0);
    EXPECT_LE(max_steps_between_plans(s, prev.view, prev.stats), 32);
    for (int step = 1; step <= 5; ++step) {
      for (auto& r : reqs) ++r.first;
      const ForwardBatch b = make_batch(reqs, page);
      Planned next = next_step_plan(prev, b, s);
      check_plan(b, s, -1, next);
      ASSERT_EQ(next.stats.num_items, prev.stats.num_items);
      for (int c = 0; c <= s.num_ctas; ++c) ASSERT_EQ(next.view.cta_item_indptr[c], prev.view.cta_item_indptr[c]);
      for (int i = 0; i < next.stats.num_items; ++i) {
        const DecodeWorkItem &a = prev.view.items[i], &z = next.view.items[i];
        ASSERT_EQ(z.kv_begin, a.kv_begin);
        ASSERT_EQ(z.kv_end, a.kv_end + a.owns_new_key);
        ASSERT_EQ(z.page_begin, b.kv_page_indptr[z.request_idx]);
      }
      prev = std::move(next);
      prev.view = decode_view(prev.layout, prev.cap, s, 0, prev.staging.data());
    }
  }
}

TEST(PlannedPlan, LayoutSectionsAreAlignedAndDisjoint) {
  const ForwardBatch b = make_batch({{1000, 1}, {50, 7}, {3, 1}}, 16);
  const PlanShape s = shape(32, 8, 264);
  PlanCapacity cap = capacity_for(b, s);
  cap.mask_bytes = 100;
  const PlanLayout l = make_layout(cap, s, 2);
  std::vector<std::pair<size_t, size_t>> sections = {
      {l.qo_indptr, 4 * 4}, {l.kv_page_indptr, 4 * 4}, {l.kv_last_page_len, 3 * 4}, {l.prefix_lens, 3 * 4},
      {l.out_cache_loc, 9 * 8}, {l.custom_mask_indptr, 4 * 8}, {l.custom_mask, 100},
      {l.kv_page_indices, b.kv_page_indices.size() * 4}};
  for (int v = 0; v < 2; ++v) {
    sections.push_back({l.cta_item_indptr[v], (264 + 1) * 4});
    sections.push_back({l.num_merges[v], 4});
    sections.push_back({l.merges[v], max_decode_merges(s) * sizeof(DecodeMergeItem)});
    sections.push_back({l.decode_items[v], cap.decode_items * sizeof(DecodeWorkItem)});
  }
  std::sort(sections.begin(), sections.end());
  for (size_t i = 0; i < sections.size(); ++i) {
    EXPECT_EQ(sections[i].first % 16, 0u);
    if (i + 1 < sections.size()) {
      EXPECT_LE(sections[i].first + sections[i].second, sections[i + 1].first);
    }
  }
  EXPECT_EQ(sections.back().first, l.kv_page_indices) << "the page table must be last (one upload of a prefix)";
  EXPECT_LE(l.used_bytes(static_cast<int>(b.kv_page_indices.size())), l.total_bytes);
}

TEST(PlannedPlan, ExtendItemsSkipDecodeRequestsLongestFirst) {
  const ForwardBatch b = make_batch({{100, 1}, {40, 30}, {500, 20}, {7, 0}, {60, 2}, {250, 200}}, 16);
  const PlanShape s = shape(8, 2, 264);
  std::vector<PrefillWorkItem> items(static_cast<size_t>(count_prefill_items(b, s)));
  const int n = plan_prefill(b, s, items);
  ASSERT_EQ(n, static_cast<int>(items.size()));
  ASSERT_GT(n, 0);
  EXPECT_EQ(items.front().request_idx, 2);
  // Every tile of the extend requests once, in falling causal cost (the KV its last row sees).
  const int group = s.group_size();
  int64_t last_cost = int64_t{1} << 40;
  int tiles_of_long = 0;
  for (const PrefillWorkItem& it : items) {
    EXPECT_GE(b.qo_len(it.request_idx), 2);
    const int64_t packed = int64_t{b.qo_len(it.request_idx)} * group;
    const int64_t last_row = std::min<int64_t>(packed, int64_t{it.qo_tile_idx + 1} * s.prefill_rows) - 1;
    const int64_t cost = b.prefix_lens[it.request_idx] + last_row / group + 1;
    EXPECT_LE(cost, last_cost);
    last_cost = cost;
    EXPECT_EQ(it.partial_row, -1);
    tiles_of_long += it.request_idx == 5;
  }
  EXPECT_EQ(tiles_of_long, (200 * group + s.prefill_rows - 1) / s.prefill_rows);
}

}  // namespace
}  // namespace attnkit::planned
