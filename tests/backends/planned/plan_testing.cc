// The `planned` scheduler tests' shared helpers (plan_testing.h).
#include "backends/planned/plan_testing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace attnkit::planned::plan_testing {

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

PlanShape shape(int qo_heads, int kv_heads, int num_ctas, int head_dim) {
  PlanShape s;
  s.num_qo_heads = qo_heads;
  s.num_kv_heads = kv_heads;
  s.head_dim = head_dim;
  s.num_ctas = num_ctas;
  s.prefill_rows = 128;  // the extend kernel's q tile at head dims 64 and 128
  return s;
}

Planned run_plan(const ForwardBatch& b, const PlanShape& s, int window_left) {
  Planned p;
  p.cap = capacity_for(b, s);
  p.layout = make_layout(p.cap, s, 1);
  p.staging.assign(p.layout.total_bytes, std::byte{0xAB});  // poisoned: every read entry must be written
  p.view = decode_view(p.layout, p.cap, s, 0, p.staging.data());
  p.stats = plan_decode(b, s, window_left, p.view);
  return p;
}

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
  int merged = 0, all_wait = 0;
  for (int m = 0; m < st.num_merges; ++m) {
    const DecodeMergeItem& mi = p.view.merges[m];
    ASSERT_GE(mi.num_partials, 2);
    if (mi.all_wait != 0) {
      // Joined by all its CTAs at once: only where the plan allows it, one level, and every chunk
      // but the last its CTA's last item (a CTA waits there for the others; waiting earlier would
      // hold up its own later items, and could wait on CTAs that wait on it).
      ASSERT_TRUE(s.all_wait_joins) << "merge " << m;
      ++all_wait;
      ASSERT_EQ(mi.next_merge, -1) << "merge " << m;
      ASSERT_GT(mi.num_partials, kJoinFanIn) << "merge " << m;
      for (int k = 0; k + 1 < mi.num_partials; ++k) {
        const int owner = slot_owner[static_cast<size_t>(mi.partial_begin + k)];
        ASSERT_GE(owner, 0) << "merge " << m << " waits on a partial no item writes";
        const int32_t* ends = p.view.cta_item_indptr.data() + 1;
        EXPECT_TRUE(std::binary_search(ends, ends + s.num_ctas, owner + 1))
            << "merge " << m << ": chunk item " << owner << " is not its CTA's last";
      }
    }
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
  EXPECT_EQ(all_wait, st.num_all_wait) << "the stats' count decides the cooperative launch";
}

}  // namespace attnkit::planned::plan_testing
