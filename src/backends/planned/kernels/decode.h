// The `planned` backend's decode kernel: the work list it reads (one item = one request, KV head,
// query-head slice and KV chunk), its params, and the launcher. The mainloop lives in
// decode_kernel.cuh, the dispatch switch in decode.cu; the planner that fills the list is plan.cc.
#pragma once

#include <cstdint>
#include <string>

#include "attnkit/dtype.h"
#include "attnkit/layer_params.h"
#include "backends/planned/kernels/batch_arrays.h"
#include "backends/planned/config.h"

typedef struct CUstream_st* cudaStream_t;

namespace attnkit::planned {

// Query heads one decode CTA computes at once: the columns of one n8 mma tile (the keys are its
// rows). A GQA group of more heads (MQA with 32, say) is cut into slices of this many, each
// reading the KV chunk once; the usual groups (2 to 8 heads) take one slice and waste at most
// half of each mma, where 16 heads as the rows of an m16 tile wasted three quarters at group 4.
inline constexpr int kDecodeRows = 8;
// KV positions one mainloop step covers (4 warps x 16 keys); chunks are cut at multiples of it.
inline constexpr int kDecodeTileKv = 64;

// One unit of work: query heads [row_begin, row_begin + rows) of KV head `kv_head_idx`'s group, for
// the one new token of request `request_idx`, against KV positions [kv_begin, kv_end). 48 bytes,
// read as three int4.
struct DecodeWorkItem {
  int32_t token_idx;    // row of q and out (the request's qo_indptr)
  int32_t request_idx;  // for the custom mask
  int32_t page_begin;   // the request's first entry in kv_page_indices (load_item reads DecodeParams::page_begin)
  int32_t kv_head_idx;
  int32_t row_begin;    // first query head of the slice, counted within the group
  int32_t kv_begin;
  int32_t kv_end;       // > kv_begin: the planner never emits an empty item
  int32_t partial_idx;  // -1: the whole answer, written to out; else the partial slot it writes
  int32_t merge_idx;    // partial_idx >= 0: the merge item that joins it; else -1
  int32_t owns_new_key; // 1: kv_end is the request's length, so the chunk holds this step's key
  int32_t reserved[2];
};

// Joins the partials of one split (token, KV head, slice): partial slots
// [partial_begin, partial_begin + num_partials) hold its chunks. The decode CTA that writes the
// last of them to finish does the join (a counter a merge item), so no merge kernel runs.
// A split with more chunks than one join round loads (kJoinFanIn) is joined in two levels: groups
// of consecutive partials into group partials, then those into the output, so the CTA that finishes
// last waits for two rounds of loads instead of one a dozen partials. (A split of more than
// kJoinFanIn^2 chunks, possible with one KV head, has more groups than that; its last join takes
// them kJoinFanIn at a time.) Where the split's CTAs may all wait for it (all_wait below), it is
// joined in one level by all of them instead.
inline constexpr int kJoinFanIn = 12;

struct DecodeMergeItem {
  int32_t token_idx;
  int32_t qo_head_begin;  // first query head (global index)
  int32_t num_rows;       // query heads, 1..kDecodeRows
  int32_t partial_begin;
  int32_t num_partials;
  int32_t next_merge;     // -1: the join writes the output; else it writes partial out_partial,
  int32_t out_partial;    // which merge item next_merge then joins
  // 1: a wide split whose chunks but the last are each their CTA's last item. In a cooperative
  // launch those CTAs wait for every partial and each joins a slice of the output (the joins'
  // loads spread over the split's SMs, one level); otherwise the last to count joins them all.
  int32_t all_wait;
};

// The layer's scalars come from LayerParams: head_dim_qk (== head_dim_vo) one of Support::head_dims,
// page_size and kv_dtype as Support allows (config.h); windows are the plan's (its variants). The
// batch's arrays come from BatchArrays.
struct DecodeParams : LayerParams, BatchArrays {
  const void* q;  // [num_tokens, num_qo_heads, head_dim_qk] q_dtype, never null
  void* out;      // [num_tokens, num_qo_heads, head_dim_qk] q_dtype, never null
  void* k_pool;  // [num_slots, num_kv_heads, head_dim_qk] kv_dtype, never null; written only with new_k
  void* v_pool;  // [num_slots, num_kv_heads, head_dim_qk] kv_dtype, never null; written only with new_k
  // This step's K and V rows, [num_tokens, num_kv_heads, head_dim_qk] kv_dtype, when the kernel also
  // stores them: the chunk that owns a request's new key reads it from here and writes it to the
  // cache at out_cache_loc (no store kernel runs). Null: the cache already holds them.
  const void* new_k = nullptr;
  const void* new_v = nullptr;
  const int64_t* out_cache_loc = nullptr;  // [num_tokens], with new_k
  float* lse = nullptr;  // [num_tokens, num_qo_heads] natural log, sinks excluded, -inf for no key; null: not wanted

  // The plan (device), for num_kv_heads / head_reps KV heads on num_ctas / head_reps CTAs: every KV
  // head of a request has the same history, so one share of the heads has the same plan as any
  // other. CTA c runs the plan's CTA c / head_reps, whose items are
  // [cta_item_indptr[c / head_reps], cta_item_indptr[c / head_reps + 1]), for share r = c % head_reps:
  // an item's KV head plus r * num_kv_heads / head_reps, its partial slot plus r * rep_partials, and
  // its merges' counters r * rep_merges further on (load_item, join_if_last).
  const int32_t* cta_item_indptr;  // [num_ctas / head_reps + 1], never null
  const DecodeWorkItem* items;     // [cta_item_indptr[num_ctas / head_reps]], never null
  float* partial_o;    // [head_reps * rep_partials, kDecodeRows, head_dim_qk] f32, normalised, v_scale applied; may be null
  float* partial_lse;  // [head_reps * rep_partials, kDecodeRows] natural log, sinks excluded; may be null
  const DecodeMergeItem* merges;   // the plan's merge items, or null when no item is split
  int32_t* merge_counters;         // [head_reps * rep_merges], zero between launches (the joining CTA resets its own)
  int head_reps = 1;     // divides num_ctas and num_kv_heads
  int rep_partials = 0;  // partial slots a share of the heads may use
  int rep_merges = 0;    // merge items a share's plan may hold

  // Diagnostics, normally null: [num_ctas, kTimelineSlots], each CTA's SM and %globaltimer (ns) at
  // its entry, when its first tile landed, when its last tile was consumed, at its exit, and around
  // its last split's join.
  unsigned long long* timeline = nullptr;

  int num_ctas = 0;    // the persistent grid: fixed, so a captured graph replays any plan
  // 1: launched cooperatively (every CTA resident at once), so all_wait merges may wait; set by
  // launch_decode where the instance's residency allows, from a request for it here.
  int cooperative = 0;
  DType q_dtype = DType::bf16;   // q and out: one of Support::q_dtypes (config.h)
};

// Slots of a CTA's timeline record: SM id, entry, first tile landed, last tile consumed, exit, the
// start and end of its last split item's fence, count and (if it came last) join, and the start of
// that join's loads.
inline constexpr int kTimelineSlots = 8;

// Resident CTAs a multiprocessor holds for this instance (the planner sizes the grid with it);
// throws where config.h's Support does not cover `key`.
int decode_ctas_per_sm(const KernelKey& key);
// Enqueues the decode kernel on `stream` (grid num_ctas), which also joins split items. Checks the
// shape first and the launch after.
void launch_decode(const DecodeParams& p, cudaStream_t stream);

}  // namespace attnkit::planned
