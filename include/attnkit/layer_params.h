// The scalars every attention kernel reads for one layer, resolved from the layer's AttentionSpec
// and the cache's config in one place: built once per layer by AttentionBackend, and embedded (as a
// base) in each backend's kernel params, so no backend fills them field by field.
#pragma once

#include "attnkit/dtype.h"

namespace attnkit {

struct AttentionSpec;
struct KvCacheConfig;

struct LayerParams {
  int num_qo_heads = 0;
  int num_kv_heads = 0;          // MLA: 1
  int head_dim_qk = 0;
  int head_dim_vo = 0;
  int page_size = 0;
  float sm_scale = 0.0f;         // the logit scale, resolved (never 0)
  float logits_soft_cap = 0.0f;  // 0: off; else logits become cap * tanh(logits / cap) after scaling
  int window_left = -1;          // -1: off; else key t is visible to position p only if t >= p - window_left
  bool causal = true;
  bool mla = false;              // absorbed MLA: one latent a slot, K and V read from it
  float k_scale = 1.0f;          // e4m3 cache: value = stored * k_scale; 1 for other dtypes
  float v_scale = 1.0f;          // MLA: k_scale (V is the front of the latent)
  DType kv_dtype = DType::bf16;  // the cache's
};

LayerParams make_layer_params(const AttentionSpec& spec, const KvCacheConfig& cache);

}  // namespace attnkit
