#include "attnkit/layer_params.h"

#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"

namespace attnkit {

LayerParams make_layer_params(const AttentionSpec& spec, const KvCacheConfig& cache) {
  const bool fp8 = cache.dtype == DType::e4m3;
  LayerParams p;
  p.num_qo_heads = spec.num_qo_heads;
  p.num_kv_heads = spec.num_kv_heads;
  p.head_dim_qk = spec.head_dim_qk;
  p.head_dim_vo = spec.head_dim_vo;
  p.page_size = cache.page_size;
  p.sm_scale = spec.scale();
  p.logits_soft_cap = spec.logits_soft_cap;
  p.window_left = spec.window_left;
  p.causal = spec.causal;
  p.mla = spec.is_mla();
  p.k_scale = fp8 ? cache.k_scale : 1.0f;
  p.v_scale = fp8 ? (cache.mla ? cache.k_scale : cache.v_scale) : 1.0f;  // the latent's V half: its one scale
  p.kv_dtype = cache.dtype;
  return p;
}

}  // namespace attnkit
