// The `planned` backend's extend (prefill / chunked prefill) kernel: its params, the work list it
// reads, the tile shape the planner needs, and the launcher. The mainloop lives in prefill_kernel.cuh
// (MMA helpers: prefill_tile.cuh, prefill_wgmma.cuh), the dispatch and instantiations in prefill.cu;
// planning and the merge of splits live elsewhere.
#pragma once

#include <cstdint>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/dtype.h"
#include "attnkit/layer_params.h"
#include "backends/planned/kernels/batch_arrays.h"

typedef struct CUstream_st* cudaStream_t;

namespace attnkit::planned {

// GQA packing: the query heads of one KV head share each K/V tile, so a request's queries for one
// KV head are laid out as qo_len * group_size "packed rows": packed row r is token r / group_size of
// the request, query head kv_head_idx * group_size + r % group_size.
//
// One work item is one CTA (for every KV head: grid.y = num_kv_heads). It computes the packed rows
// [qo_tile_idx * tile_rows, min((qo_tile_idx + 1) * tile_rows, qo_len * group_size)) against the
// request's KV positions [kv_begin, kv_end) (further cut by the mask).
struct PrefillWorkItem {
  int32_t request_idx;
  int32_t qo_tile_idx;
  int32_t kv_begin;     // first KV position visited; 0 for an unsplit item
  int32_t kv_end;       // one past the last; -1: the request's kv_len
  // -1: this item is the whole answer for its rows: it writes `out` (and `lse`) directly.
  // >= 0: one split of several: token j of the request writes partial row partial_row + j, so the
  // planner gives each (request, split) qo_len consecutive rows, shared by all q tiles of that split.
  int32_t partial_row;
};

// The layer's scalars come from LayerParams: head_dim_qk (== head_dim_vo) one of Support::head_dims,
// page_size and kv_dtype as Support allows (config.h). The batch's arrays come from BatchArrays.
struct PrefillParams : LayerParams, BatchArrays {
  // Activations, in q_dtype (bf16 or f16); out has q's dtype.
  const void* q = nullptr;  // [num_tokens, num_qo_heads, head_dim_qk], never null
  void* out = nullptr;      // [num_tokens, num_qo_heads, head_dim_qk], never null (unused by split items)
  float* lse = nullptr;     // [num_tokens, num_qo_heads] natural log, sinks excluded, -inf for an empty row; may be null

  // One layer's paged pools in kv_dtype: bf16 or f16 (converted to q's type when it differs), or
  // e4m3 read as stored * k_scale / v_scale.
  const void* k_pool = nullptr;  // [num_slots, num_kv_heads, head_dim_qk], never null; slot s is in page s / page_size
  const void* v_pool = nullptr;  // [num_slots, num_kv_heads, head_dim_qk], never null

  // The work list (from the planner, on the device) and where split items write.
  const PrefillWorkItem* work = nullptr;  // [num_work_items], never null
  int num_work_items = 0;
  float* partial_o = nullptr;    // [num_partial_rows, num_qo_heads, head_dim_qk] f32; null when no item splits
  float* partial_lse = nullptr;  // [num_partial_rows, num_qo_heads] natural log, sinks excluded; null when no item splits

  int batch_size = 0;
  DType q_dtype = DType::bf16;   // q and out: one of Support::q_dtypes (config.h)
};

// Packed rows one CTA covers for this head dim (the q tile), for the planner's tile count:
// num_qo_tiles(i) = ceil(qo_len(i) * group_size / prefill_tile_rows(head_dim)).
int prefill_tile_rows(int head_dim);
// KV positions one mainloop step covers; split boundaries that are multiples of it waste nothing.
int prefill_tile_kv(int head_dim);

// The simplest work list: every (request, q tile) once, unsplit, the tiles that visit the most KV
// positions first (the launch then ends on short tiles); requests with qo_len 0 get no item.
// A planner may reorder or split items.
std::vector<PrefillWorkItem> make_prefill_work(const ForwardBatch& batch, int num_qo_heads,
                                               int num_kv_heads, int head_dim);

// Throws attnkit::Error naming the first unsupported field (config.h's Support, then the heads).
void check_prefill_params(const PrefillParams& p);
// Enqueues the kernel on `stream`; checks the params and the launch. Nothing to do when
// num_work_items is 0. Head dims 64 and 128 run on wgmma: a Hopper GPU (sm_90a code) is required.
void launch_prefill(const PrefillParams& p, cudaStream_t stream);

}  // namespace attnkit::planned
