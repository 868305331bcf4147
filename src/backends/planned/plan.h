// The `planned` backend's host scheduler: from a batch's lengths alone it cuts every decode
// request's KV history into chunks that balance the persistent CTAs, lists the splits to merge, and
// lists the extend kernel's work; and it lays all of it and the batch's CSR arrays out in one
// buffer, so one copy uploads a plan. Host-only (no CUDA): the device side is graph_state.* .
//
// Agreement with kernels/prefill.h: extend requests (qo_len >= 2) go to launch_prefill with an
// unsplit work list, longest KV first; requests with one new token (decode requests, also inside a
// mixed batch) go to the decode kernel. Wanted from the extend kernel: a 16-bit cache of the other
// 16-bit type than q (bf16 q with an f16 cache), which the decode kernel already reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "attnkit/batch.h"
#include "backends/planned/kernels/decode.h"
#include "backends/planned/kernels/prefill.h"

namespace attnkit::planned {

// Cost model, in KV positions: an item also pays a fixed price (its query load, the cross-warp
// combine, the partial's write, fence and count, and the pipeline's refill), and no chunk is cut
// shorter than kMinChunk unless its history is, so a split's merge stays cheap next to the chunk it
// joins. The price: per-CTA timelines on the H200 (2026-11-29) put an item at 200-360 positions'
// time; 3 tiles against 1 raised 1 x 32768 from 2.54 to 2.77 TB/s and the skewed batch from 4.01
// to 4.18, and moved the rest by under 0.5%.
inline constexpr int kItemCost = 3 * kDecodeTileKv;
inline constexpr int kMinChunk = 4 * kDecodeTileKv;
// Chunks are cut at multiples of this many positions: a warp's 16 keys then stay in one page of 16
// or more (the copy's fast path), while shares of a few hundred positions still divide finely.
inline constexpr int kChunkGrain = 16;
// The most a CTA takes beyond the mean share to make up for CTAs that closed light.
inline constexpr int kCatchUp = 32;

struct PlanShape {
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int num_ctas = 0;  // the persistent decode grid: SMs x resident CTAs an SM
  int prefill_rows = 0;  // GQA-packed rows of one extend work item (the extend kernel's q tile)
  // Wide splits may be joined by all their CTAs at once (DecodeMergeItem::all_wait): the decode
  // kernel is launched cooperatively.
  bool all_wait_joins = false;
  int group_size() const { return num_qo_heads / num_kv_heads; }
  // Query-head slices of kDecodeRows a group is cut into (1 unless a group has more than 8 heads).
  int num_slices() const { return (group_size() + kDecodeRows - 1) / kDecodeRows; }
};

// The decode grid runs one plan over every share of the KV heads (DecodeParams::head_reps): each KV
// head of a request has the same history, so the plan for num_kv_heads / reps heads on
// num_ctas / reps CTAs serves each share, and costs a reps-th of planning them all (256 requests
// of [128, 4096], llama3-8b heads, 396 CTAs: 9.0 us whole, 3.4 us a share of 4, on a 2-vCPU Zen 4 host).
// reps is the largest that divides both the KV heads and the CTAs.
int plan_head_reps(const PlanShape& grid);
// The persistent decode grid for `slots` resident CTAs (SMs x CTAs an SM): trimmed to a multiple of
// the most shares of the KV heads that leaves at most 2% of the slots empty (396 -> 392 for 8 KV
// heads: 8 shares of one head on 49 CTAs). The CTAs of one plan CTA read every head's rows of the
// same tokens at once, and the scheduler plans one head instead of two: 3.96 -> 2.41 us at 256
// requests (2-vCPU Zen 4 host), decode 0.999-1.004 of 396 CTAs in 4 shares (H200, 3 rounds alternated).
int decode_grid_ctas(int slots, int num_kv_heads);
// What the scheduler plans for one share: the same group and head_dim, 1/reps of the heads and CTAs.
PlanShape share_shape(const PlanShape& grid, int reps);

// Where the planner writes one decode plan (host memory: the staging buffer, or a test's arrays).
struct DecodePlanView {
  std::span<int32_t> cta_item_indptr;  // [num_ctas + 1]
  std::span<DecodeWorkItem> items;     // capacity: max_decode_items()
  std::span<DecodeMergeItem> merges;   // capacity: max_decode_merges()
  int32_t* num_merges = nullptr;       // [1]
};

struct DecodePlanStats {
  int num_items = 0;
  int num_merges = 0;
  int num_partials = 0;
  int num_all_wait = 0;  // merges with all_wait set: the launch must be cooperative
  int num_decode_requests = 0;
  int64_t total_cost = 0;    // sum of item costs (positions + kItemCost each)
  int64_t max_cta_cost = 0;  // the busiest CTA's
};

// Bounds that hold for every batch: every CTA boundary splits at most one (request, head, slice)
// unit, so there are at most num_ctas - 1 splits of 2 (num_ctas - 1) chunks in all, plus the
// first-level merges and group partials of splits joined in two levels (plan_decode.cc).
int max_decode_items(int num_requests, const PlanShape& shape);
int max_decode_merges(const PlanShape& shape);
int max_decode_partials(const PlanShape& shape);

// The KV positions a decode request's one query can see: [kv_begin, kv_len), cut by the window.
inline int decode_kv_begin(int kv_len, int window_left) {
  return window_left < 0 ? 0 : (kv_len - 1 - window_left > 0 ? kv_len - 1 - window_left : 0);
}

// Plans the batch's requests with exactly one new token (all of them in a decode batch). CTA c
// gets items [cta_item_indptr[c], cta_item_indptr[c + 1]) whose costs sum to about the mean; a
// unit is split only where a CTA's share ends. Throws attnkit::Error when `out` is too small.
DecodePlanStats plan_decode(const ForwardBatch& batch, const PlanShape& shape, int window_left, DecodePlanView out);

// How many decode steps in a row may keep a plan_decode's plan. For the next step (a decode batch
// without a window whose every history is one position longer) the decode kernel reads the same
// items, taking each unit's new-key chunk end and every page-table offset from the batch's arrays
// (decode_copy.cuh's load_item); each step adds one position to every unit whose end a CTA holds.
// The bound: the most units a CTA holds times the steps stays within 1% of the mean CTA's load (at
// most 32).
int max_steps_between_plans(const PlanShape& shape, const DecodePlanView& plan, const DecodePlanStats& stats);

// The extend kernel's work: every q tile of every request with two or more new tokens, unsplit,
// the longest KV history first. Returns the number of items written.
int plan_prefill(const ForwardBatch& batch, const PlanShape& shape, std::span<PrefillWorkItem> out);
int count_prefill_items(const ForwardBatch& batch, const PlanShape& shape);

// Capacities of one upload buffer. A frozen buffer (CUDA graphs) keeps one set for its lifetime.
struct PlanCapacity {
  int batch_size = 0;
  int num_pages = 0;
  int num_tokens = 0;
  int64_t mask_bytes = 0;   // custom_mask entries; 0: no custom-mask section
  int decode_items = 0;     // per window variant
  int prefill_items = 0;
  bool fits(const PlanCapacity& need) const;
};

// Byte offsets of each section in the upload buffer: the plan's own sections first, then the
// batch's arrays from qo_indptr on, the page table last (page_table.h: each request's entries from
// page_begin[i], not kv_page_indptr[i]). One copy of [0, used_bytes(entries in use)) carries a plan;
// a plan derived for the next decode step copies only [qo_indptr, used_bytes).
struct PlanLayout {
  static constexpr int kMaxVariants = 4;  // distinct window_left values among the model's layers
  size_t qo_indptr = 0, kv_page_indptr = 0, kv_last_page_len = 0, prefix_lens = 0, page_begin = 0;
  size_t out_cache_loc = 0, custom_mask_indptr = 0, custom_mask = 0, prefill_items = 0;
  size_t cta_item_indptr[kMaxVariants] = {}, decode_items[kMaxVariants] = {};
  size_t num_merges[kMaxVariants] = {}, merges[kMaxVariants] = {};
  size_t kv_page_indices = 0;  // 64-byte aligned: the page table's slots are whole lines
  size_t page_table_entries = 0;
  size_t total_bytes = 0;
  size_t used_bytes(size_t table_entries) const { return kv_page_indices + table_entries * sizeof(int32_t); }
  // The end of the decode variants' sections (the extend items come next): a buffer laid out like
  // the staging one needs this many bytes to hold every decode plan.
  size_t decode_sections_end() const { return prefill_items; }
};
PlanLayout make_layout(const PlanCapacity& capacity, const PlanShape& shape, int num_variants);

// What a batch needs (decode items per variant at their bound).
PlanCapacity capacity_for(const ForwardBatch& batch, const PlanShape& shape);

// Copies the batch's CSR arrays but the page table (PageTableSlots writes it) into their sections
// of `staging` (host memory laid out by `layout`).
void write_batch_arrays(const ForwardBatch& batch, const PlanLayout& layout, std::byte* staging);

// The plan view of variant v inside `staging`.
DecodePlanView decode_view(const PlanLayout& layout, const PlanCapacity& capacity, const PlanShape& shape, int v,
                           std::byte* staging);

// Copies the used part of variant v's decode plan (its CTA bounds, merges and items, as `stats`
// counts them) from `from` to `to`, both laid out by `layout`.
void copy_decode_plan(const PlanLayout& layout, const PlanShape& shape, int v, const DecodePlanStats& stats,
                      const std::byte* from, std::byte* to);

}  // namespace attnkit::planned
