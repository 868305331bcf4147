// The parameters of naive attention over one batch (one layer): three kernels read them, scores,
// softmax and P V, each launched once for every request and head. Host-only header; the launchers
// are declared in kernels/launch.h.
#pragma once

#include <cstdint>

#include "attnkit/dtype.h"
#include "attnkit/layer_params.h"
#include "backends/cuda_naive/config.h"

namespace attnkit::cuda_naive {

// One request, as the kernels see it; nothing here depends on the layer's head count, so one
// upload serves every layer. Its score rows are (head h, query j), numbered
// num_qo_heads * qo_start + h * qo_len + j across the batch; its scores start at float
// num_qo_heads * pair_offset of the workspace.
struct RequestInfo {
  int64_t pair_offset = 0;   // sum of qo_len * kv_len over the requests before this one
  int64_t mask_offset = -1;  // first byte of its [qo_len, kv_len] custom mask; -1: the spec's rule
  int32_t qo_start = 0;      // first token of the request in q and out (qo_indptr)
  int32_t qo_len = 0;
  int32_t kv_len = 0;
  int32_t prefix_len = 0;    // query j sits at position prefix_len + j
  int32_t page_start = 0;    // first entry of the request's pages in page_indices
};

// The layer's scalars (heads, head dims, page size, scale, soft-cap, mask rule, fp8 scales, cache
// dtype) come from LayerParams; a custom mask overrides `causal` for its request.
struct BatchParams : LayerParams {
  const void* q = nullptr;                // [num_tokens, num_qo_heads, head_dim_qk] q_dtype, never null
  const void* k_pool = nullptr;           // [num_slots, num_kv_heads, head_dim_qk] kv_dtype, never null
  const void* v_pool = nullptr;           // [num_slots, num_kv_heads, head_dim_vo] kv_dtype, never null
  const RequestInfo* requests = nullptr;  // [batch_size], never null
  const int32_t* page_indices = nullptr;  // [total pages] every request's page table, never null
  const uint8_t* custom_mask = nullptr;   // [total mask bytes] 0/1; null when no request has a mask
  const float* sinks = nullptr;           // [num_qo_heads] sink logits; null: no sinks
  float* scores = nullptr;                // [sum of num_qo_heads * qo_len * kv_len] workspace: S, then P
  void* out = nullptr;                    // [num_tokens, num_qo_heads, head_dim_vo] q_dtype, never null

  DType q_dtype = DType::bf16;   // q and out
  int batch_size = 0;
  int64_t num_rows = 0;          // score rows of the batch: num_qo_heads * num_tokens
  int max_kv_len = 0;
};

}  // namespace attnkit::cuda_naive
