// What the `cpu` kernels read and leave behind: one layer's pointers (AttendParams), the piece of
// work one task computes (UnitWork) and its unnormalised result (UnitState). Plain data, no framework types.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attnkit/dtype.h"
#include "attnkit/layer_params.h"

namespace attnkit::cpu {

// Most query rows one unit of the rows kernel holds: its Q^T, S^T and O tiles (224 KiB with
// llama3-8b heads) stay in L2, and each packed K/V tile serves 128 rows (64: 3-10% slower prefill).
constexpr int kBlockRows = 128;

// The layer's scalars (heads, head dims, page size, scales, soft-cap, mask rule, cache dtype, MLA)
// come from LayerParams; what the kernels derive from them is below.
struct AttendParams : LayerParams {
  const void* q = nullptr;         // [num_tokens, num_qo_heads, head_dim_qk] of q_dtype, never null
  DType q_dtype = DType::f32;
  void* out = nullptr;             // [num_tokens, num_qo_heads, head_dim_vo] of out_dtype, never null
  DType out_dtype = DType::f32;
  float* lse = nullptr;            // [num_tokens, num_qo_heads] f32 natural-log LSE (sinks left out), or null
  const void* k_pool = nullptr;    // [num_slots, num_kv_heads, head_dim_qk] of kv_dtype (MLA: the latent)
  const void* v_pool = nullptr;    // [num_slots, num_kv_heads, head_dim_vo]; MLA: == k_pool, V is the
                                   // first head_dim_vo entries of each latent slot
  bool fp8_blocked_latent = false;  // MLA: slots in LatentFormat::fp8_blocked (strides in bytes), decoded per row
  int64_t k_slot_stride = 0;       // elements from one slot to the next in k_pool
  int64_t v_slot_stride = 0;       // ... in v_pool
  int64_t v_head_stride = 0;       // elements from one KV head's V to the next (MLA: 0, all heads share it)
  int group_size = 0;              // num_qo_heads / num_kv_heads
  float q_scale = 1.0f;            // sm_scale, times k_scale for e4m3 caches: folded into q once
  const float* sinks = nullptr;    // [num_qo_heads] or null
  int kv_tile = 64;                // keys a tile of the rows kernel holds (fixed per layer shape)
  bool bf16_dot = false;           // the CPU has AVX512-BF16: bf16 q and cache take bf16_dot.h's products

  // The batch, in its CSR form.
  const int32_t* qo_indptr = nullptr;        // [batch_size + 1]
  const int32_t* kv_page_indptr = nullptr;   // [batch_size + 1]
  const int32_t* kv_page_indices = nullptr;  // [kv_page_indptr[batch_size]]
  const int32_t* prefix_lens = nullptr;      // [batch_size]
  const uint8_t* custom_mask = nullptr;      // null, or row-major [qo_len, kv_len] per request from
  const int64_t* custom_mask_indptr = nullptr;  // custom_mask[custom_mask_indptr[i]]; empty range: none

  int kv_len(int request_idx) const { return prefix_lens[request_idx] + qo_indptr[request_idx + 1] - qo_indptr[request_idx]; }
  int64_t slot(int request_idx, int64_t position) const {
    const int32_t page = kv_page_indices[kv_page_indptr[request_idx] + position / page_size];
    return int64_t{page} * page_size + position % page_size;
  }
  const uint8_t* mask_of(int request_idx) const {
    if (custom_mask == nullptr || custom_mask_indptr[request_idx] == custom_mask_indptr[request_idx + 1]) return nullptr;
    return custom_mask + custom_mask_indptr[request_idx];
  }
};

// One task: a block of query rows of one request against a range of its keys.
// Rows are numbered qo_idx * rows_per_token + head_in_group: the rows kernel takes one KV head's
// group (rows_per_token = group_size), the heads kernel every head of a decode token
// (rows_per_token = num_qo_heads, kv_head = 0).
struct UnitWork {
  int request_idx = 0;
  int kv_head = 0;
  int rows_per_token = 1;
  int row_begin = 0;      // [row_begin, row_end)
  int row_end = 0;
  int kv_begin = 0;       // keys [kv_begin, kv_end), already trimmed to what the rows can see
  int kv_end = 0;

  int num_rows() const { return row_end - row_begin; }
  int64_t token(const AttendParams& p, int row) const {
    return p.qo_indptr[request_idx] + (row_begin + row) / rows_per_token;
  }
  int head(int row) const { return kv_head * rows_per_token + (row_begin + row) % rows_per_token; }
};

// A unit's result before normalisation: o = sum_t exp(s_t - m) v_t, l = sum_t exp(s_t - m), m the
// running max of the logits (natural-log units, soft-capped, masked). A row that saw no key has
// m = -inf, l = 0, o = 0. V is still in stored units: e4m3's v_scale is applied by the epilogue.
struct UnitState {
  const float* o = nullptr;  // [num_rows, o_stride]
  const float* m = nullptr;  // [num_rows]
  const float* l = nullptr;  // [num_rows]
  int64_t o_stride = 0;
};

}  // namespace attnkit::cpu
