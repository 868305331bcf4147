// The parameters of one request's naive attention (one layer): three kernels read them, scores,
// softmax and P V. Host-only header; the launchers are declared in kernels/launch.h.
#pragma once

#include <cstdint>

#include "attnkit/dtype.h"

namespace attnkit::cuda_naive {

// The widest head this backend's kernels hold in registers and shared memory.
inline constexpr int kMaxHeadDim = 256;

struct RequestParams {
  const void* q = nullptr;                // [qo_len, num_qo_heads, head_dim_qk] q_dtype, never null
  const void* k_pool = nullptr;           // [num_slots, num_kv_heads, head_dim_qk] kv_dtype, never null
  const void* v_pool = nullptr;           // [num_slots, num_kv_heads, head_dim_vo] kv_dtype, never null
  const int32_t* page_indices = nullptr;  // [ceil(kv_len / page_size)] this request's pages, never null
  const uint8_t* mask = nullptr;          // [qo_len, kv_len] 0/1 row-major; null: the spec's causal rule
  const float* sinks = nullptr;           // [num_qo_heads] sink logits; null: no sinks
  float* scores = nullptr;                // [num_qo_heads, qo_len, kv_len] workspace: S, then P in place
  void* out = nullptr;                    // [qo_len, num_qo_heads, head_dim_vo] q_dtype, never null

  DType q_dtype = DType::bf16;   // q and out
  DType kv_dtype = DType::bf16;  // the pools
  int qo_len = 0;
  int kv_len = 0;
  int prefix_len = 0;            // query j sits at position prefix_len + j
  int page_size = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim_qk = 0;
  int head_dim_vo = 0;
  float sm_scale = 0.0f;
  float soft_cap = 0.0f;         // 0: off
  float k_scale = 1.0f;          // e4m3 pools: value = stored * scale; else 1
  float v_scale = 1.0f;
  bool causal = true;            // ignored where mask is set
  int window_left = -1;          // -1: off
};

}  // namespace attnkit::cuda_naive
