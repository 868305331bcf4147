// The attention formula, literally: for every request and query head, the full score row in fp64,
// the mask, the soft-cap, the softmax (with sinks) and the weighted sum of V.
#pragma once

#include "attnkit/batch.h"
#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"

namespace attnkit::reference {

struct AttentionParams {
  const AttentionSpec* spec = nullptr;     // never null
  const KvCacheConfig* cache = nullptr;    // never null
  const void* k_pool = nullptr;            // [num_slots, num_kv_heads, head_dim_k] cache dtype
  const void* v_pool = nullptr;            // [num_slots, num_kv_heads, v_row] cache dtype (MLA: the latent pool)
  const ForwardBatch* batch = nullptr;     // never null
  const void* q = nullptr;                 // [num_tokens, num_qo_heads, head_dim_qk] q_dtype
  DType q_dtype = DType::f32;
  void* out = nullptr;                     // [num_tokens, num_qo_heads, head_dim_vo] out_dtype
  DType out_dtype = DType::f32;
  // Optional [num_tokens, num_qo_heads] natural-log LSE over the visible keys (sinks not included,
  // so partial states merge exactly; -inf for a fully masked row).
  float* lse = nullptr;
};

void attention(const AttentionParams& params);

// Whether key `kv_idx` is visible to the query at position `q_pos` of request `request_idx`
// (custom mask when the request has one, else causal; the window applies to both).
bool is_visible(const AttentionSpec& spec, const ForwardBatch& batch, int request_idx, int qo_idx,
                int64_t kv_idx);

}  // namespace attnkit::reference
