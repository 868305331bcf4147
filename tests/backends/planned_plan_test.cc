// The `planned` host scheduler, without a GPU: every decode unit's visible KV covered exactly once,
// CTAs balanced, no chunk past the share, the merge list consistent, the upload layout sound.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/planned/plan.h"

namespace attnkit::planned {
namespace {

// A batch by hand: (kv_len, qo_len) per request, pages 0, 1, 2, ... in order.
ForwardBatch make_batch(const std::vector<std::pair<int, int>>& reqs, int page_size) {
  ForwardBatch b;
  b.page_size = page_size;
  b.qo_indptr.push_back(0);
  b.kv_page_indptr.push_back(0);
  int next_page = 0, num_single = 0;
  for (const auto& [kv_len, qo_len] : reqs) {
    const int pages = (kv_len + page_size - 1) / page_size;
    for (int p = 0; p < pages; ++p) b.kv_page_indices.push_back(next_page++);
    b.qo_indptr.push_back(b.qo_indptr.back() + qo_len);
    b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
    b.kv_last_page_len.push_back(kv_len == 0 ? 0 : (kv_len - 1) % page_size + 1);
    b.prefix_lens.push_back(kv_len - qo_len);
    for (int j = 0; j < qo_len; ++j) b.out_cache_loc.push_back(0);
    num_single += qo_len == 1;
  }
  b.mode = num_single == static_cast<int>(reqs.size()) ? ForwardMode::decode
                                                        : num_single == 0 ? ForwardMode::extend : ForwardMode::mixed;
  return b;
}

PlanShape shape(int qo_heads, int kv_heads, int num_ctas, int head_dim = 128) {
  PlanShape s;
  s.num_qo_heads = qo_heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.num_ctas = num_ctas;
  return s;
}

struct Planned {
  PlanCapacity cap;
  PlanLayout layout;
  std::vector<std::byte> staging;
  DecodePlanView view;
  DecodePlanStats stats;
};

Planned run_plan(const ForwardBatch& b, const PlanShape& s, int window_left) {
  Planned p;
  p.cap = capacity_for(b, s);
  p.layout = make_layout(p.cap, s, 1);
  p.staging.assign(p.layout.total_bytes, std::byte{0xAB});  // poisoned: every read entry must be written
  p.view = decode_view(p.layout, p.cap, s, 0, p.staging.data());
  p.stats = plan_decode(b, s, window_left, p.view);
  return p;
}

// Checks every invariant of one decode plan.
void check_plan(const ForwardBatch& b, const PlanShape& s, int window_left, const Planned& p) {
  const DecodePlanStats& st = p.stats;
  const auto& indptr = p.view.cta_item_indptr;
  ASSERT_EQ(indptr[0], 0);
  for (int c = 0; c < s.num_ctas; ++c) ASSERT_LE(indptr[c], indptr[c + 1]) << "cta " << c;
  ASSERT_EQ(indptr[s.num_ctas], st.num_items);

  // Coverage: per (request, kv head, slice) the chunks tile [begin, kv_len) exactly.
  const int group = s.group_size();
  std::map<std::tuple<int, int, int>, std::vector<std::pair<int, int>>> chunks;
  int64_t total = 0, max_cta = 0;
  for (int c = 0; c < s.num_ctas; ++c) {
    int64_t cta_cost = 0;
    for (int i = indptr[c]; i < indptr[c + 1]; ++i) {
      const DecodeWorkItem& it = p.view.items[i];
      ASSERT_LT(it.kv_begin, it.kv_end) << "item " << i << " is empty";
      ASSERT_EQ(b.qo_len(it.request_idx), 1);
      ASSERT_EQ(it.token_idx, b.qo_indptr[it.request_idx]);
      ASSERT_EQ(it.page_begin, b.kv_page_indptr[it.request_idx]);
      ASSERT_EQ(it.row_begin % kDecodeRows, 0);
      ASSERT_LT(it.row_begin, group);
      chunks[{it.request_idx, it.kv_head_idx, it.row_begin}].push_back({it.kv_begin, it.kv_end});
      cta_cost += it.kv_end - it.kv_begin + kItemCost;
    }
    total += cta_cost;
    max_cta = std::max(max_cta, cta_cost);
  }
  EXPECT_EQ(total, st.total_cost);
  EXPECT_EQ(max_cta, st.max_cta_cost);
  int units = 0;
  for (int i = 0; i < b.batch_size(); ++i) {
    if (b.qo_len(i) != 1) continue;
    const int kv_len = b.kv_len(i);
    for (int h = 0; h < s.num_kv_heads; ++h) {
      for (int row = 0; row < group; row += kDecodeRows) {
        ++units;
        auto found = chunks.find({i, h, row});
        ASSERT_NE(found, chunks.end()) << "request " << i << " head " << h << " rows " << row << " not planned";
        auto v = found->second;
        std::sort(v.begin(), v.end());
        int at = decode_kv_begin(kv_len, window_left);
        for (const auto& [lo, hi] : v) {
          ASSERT_EQ(lo, at) << "request " << i << " head " << h << ": gap or overlap";
          at = hi;
        }
        ASSERT_EQ(at, kv_len) << "request " << i << " head " << h << ": history not covered to the end";
        if (v.size() > 1) {
          // A split never leaves a chunk shorter than kMinChunk, and none longer than a CTA's
          // share (or a minimum chunk, where shares are smaller) plus the tail it may absorb.
          const int64_t share = (st.total_cost + s.num_ctas - 1) / s.num_ctas;
          for (const auto& [lo, hi] : v) {
            EXPECT_GE(hi - lo, kMinChunk);
            EXPECT_LE(hi - lo, std::max<int64_t>(share, kMinChunk) + kMinChunk);
          }
        }
      }
    }
  }
  EXPECT_EQ(static_cast<int>(chunks.size()), units) << "an item belongs to no unit";

  // Balance: no CTA carries more than the mean (or a minimum chunk, where the mean is smaller),
  // plus what it may take to make up for light CTAs, plus the largest piece never cut (a unit
  // shorter than two minimum chunks) and its fixed cost.
  const int64_t mean = (st.total_cost + s.num_ctas - 1) / s.num_ctas;
  EXPECT_LE(st.max_cta_cost, std::max<int64_t>(mean, kMinChunk) + kCatchUp + 2 * kMinChunk + kItemCost)
      << "mean " << mean << ", busiest CTA " << st.max_cta_cost;

  // Merges: each lists consecutive partial slots of one split; every slot is written by one item
  // or one first-level merge (a split of more than kJoinFanIn chunks), and read by one merge.
  ASSERT_EQ(*p.view.num_merges, st.num_merges);
  ASSERT_LE(st.num_merges, max_decode_merges(s));
  ASSERT_LE(st.num_partials, max_decode_partials(s));
  std::vector<int> slot_owner(static_cast<size_t>(st.num_partials), -1);  // item i, or -2 - merge m
  for (int i = 0; i < st.num_items; ++i) {
    const int slot = p.view.items[i].partial_idx;
    if (slot < 0) {
      EXPECT_EQ(p.view.items[i].merge_idx, -1);
      continue;
    }
    ASSERT_LT(slot, st.num_partials);
    ASSERT_EQ(slot_owner[static_cast<size_t>(slot)], -1) << "partial slot " << slot << " written twice";
    slot_owner[static_cast<size_t>(slot)] = i;
  }
  for (int m = 0; m < st.num_merges; ++m) {
    const DecodeMergeItem& mi = p.view.merges[m];
    if (mi.next_merge < 0) continue;
    ASSERT_GT(mi.next_merge, m);
    ASSERT_LT(mi.next_merge, st.num_merges);
    ASSERT_GE(mi.out_partial, 0);
    ASSERT_LT(mi.out_partial, st.num_partials);
    ASSERT_EQ(slot_owner[static_cast<size_t>(mi.out_partial)], -1) << "partial slot " << mi.out_partial << " written twice";
    slot_owner[static_cast<size_t>(mi.out_partial)] = -2 - m;
  }
  int merged = 0;
  for (int m = 0; m < st.num_merges; ++m) {
    const DecodeMergeItem& mi = p.view.merges[m];
    ASSERT_GE(mi.num_partials, 2);
    if (mi.next_merge >= 0) {
      ASSERT_LE(mi.num_partials, kJoinFanIn) << "first-level merge " << m << " takes more than one round";
    }
    merged += mi.num_partials;
    for (int k = 0; k < mi.num_partials; ++k) {
      const int owner = slot_owner[static_cast<size_t>(mi.partial_begin + k)];
      ASSERT_NE(owner, -1) << "merge " << m << " reads a partial slot nothing writes";
      if (owner <= -2) {
        const DecodeMergeItem& from = p.view.merges[-2 - owner];
        EXPECT_EQ(from.next_merge, m);
        EXPECT_EQ(from.token_idx, mi.token_idx);
        EXPECT_EQ(from.qo_head_begin, mi.qo_head_begin);
        EXPECT_EQ(from.num_rows, mi.num_rows);
        continue;
      }
      const DecodeWorkItem& it = p.view.items[owner];
      EXPECT_EQ(it.token_idx, mi.token_idx);
      EXPECT_EQ(it.kv_head_idx * group + it.row_begin, mi.qo_head_begin);
      EXPECT_EQ(std::min(kDecodeRows, group - it.row_begin), mi.num_rows);
      EXPECT_EQ(it.merge_idx, m) << "a partial's item names another merge (its CTA would join the wrong split)";
    }
  }
  EXPECT_EQ(merged, st.num_partials) << "a partial slot no merge reads";
}

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
    const PlanShape s = shape(group * kv_heads, kv_heads, ctas);
    SCOPED_TRACE("trial " + std::to_string(trial));
    check_plan(b, s, window, run_plan(b, s, window));
  }
}

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
  const ForwardBatch b = make_batch({{100, 1}, {40, 30}, {500, 20}, {7, 0}, {60, 2}}, 16);
  const PlanShape s = shape(8, 2, 264);
  if (count_prefill_items(b, s) == 0) GTEST_SKIP() << "the extend kernel is not built";
  std::vector<PrefillWorkItem> items(static_cast<size_t>(count_prefill_items(b, s)));
  const int n = plan_prefill(b, s, items);
  ASSERT_EQ(n, static_cast<int>(items.size()));
  ASSERT_GT(n, 0);
  EXPECT_EQ(items.front().request_idx, 2);
  int last_kv = 1 << 30;
  for (const PrefillWorkItem& it : items) {
    EXPECT_GE(b.qo_len(it.request_idx), 2);
    EXPECT_LE(b.kv_len(it.request_idx), last_kv);
    last_kv = b.kv_len(it.request_idx);
    EXPECT_EQ(it.partial_row, -1);
  }
}

}  // namespace
}  // namespace attnkit::planned
