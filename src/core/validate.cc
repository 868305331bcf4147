// why_unsupported: the one answer to "can this backend run this spec, cache and batch?".
#include <algorithm>

#include "attnkit/backend.h"

namespace attnkit {

namespace {
template <typename T>
bool contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string list(const std::vector<DType>& v) {
  std::string s;
  for (DType d : v) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int d : v) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}
}  // namespace

std::string why_unsupported(const Capabilities& caps, const AttentionSpec& spec, const KvCacheConfig& cache,
                            const ForwardBatch* batch, std::optional<DType> q_dtype) {
  using detail::concat;
  if (caps.device != cache.device) {
    return concat("runs on ", device_name(caps.device), ", the cache is on ", device_name(cache.device));
  }
  if (!contains(caps.kv_dtypes, cache.dtype)) {
    return concat("cache dtype must be one of ", list(caps.kv_dtypes), ", got ", dtype_name(cache.dtype));
  }
  if (cache.latent_format == LatentFormat::fp8_blocked && !caps.fp8_blocked_latent) {
    return "the fp8_blocked latent cache (e4m3 in blocks of 128 with their scales, RoPE in bf16) is not supported";
  }
  if (cache.mla && cache.dtype == DType::e4m3 && cache.latent_format == LatentFormat::plain && !caps.plain_e4m3_latent) {
    return "an e4m3 latent cache must be LatentFormat::fp8_blocked here (per-block scales), not plain with one k_scale";
  }
  if (q_dtype && !contains(caps.q_dtypes, *q_dtype)) {
    return concat("q dtype must be one of ", list(caps.q_dtypes), ", got ", dtype_name(*q_dtype));
  }
  if (q_dtype && caps.kv_dtype_is_q_dtype && cache.dtype != DType::e4m3 && *q_dtype != cache.dtype) {
    return concat("cache dtype must be q's (", dtype_name(*q_dtype), "), got ", dtype_name(cache.dtype));
  }
  if (cache.page_size < caps.min_page_size || cache.page_size > caps.max_page_size) {
    return concat("page_size must be in ", caps.min_page_size, "..", caps.max_page_size, ", got ", cache.page_size);
  }
  if (!caps.page_sizes.empty() && !contains(caps.page_sizes, cache.page_size)) {
    return concat("page_size must be one of ", list(caps.page_sizes), ", got ", cache.page_size);
  }
  if (spec.is_mla()) {
    if (!caps.mla) return "MLA is not supported";
    if (!caps.mla_dims.empty() && !contains(caps.mla_dims, spec.kv_lora_rank)) {
      return concat("MLA kv_lora_rank must be one of ", list(caps.mla_dims), ", got ", spec.kv_lora_rank);
    }
    if (!caps.mla_rope_dims.empty() && !contains(caps.mla_rope_dims, spec.qk_rope_head_dim)) {
      return concat("MLA qk_rope_head_dim must be one of ", list(caps.mla_rope_dims), ", got ", spec.qk_rope_head_dim);
    }
  } else {
    if (!caps.mha) return "only MLA is supported";
    if (!caps.head_dims.empty()) {
      if (spec.head_dim_qk != spec.head_dim_vo) {
        return concat("head_dim_qk and head_dim_vo must be equal, got ", spec.head_dim_qk, " and ", spec.head_dim_vo);
      }
      if (!contains(caps.head_dims, spec.head_dim_qk)) {
        return concat("head_dim must be one of ", list(caps.head_dims), ", got ", spec.head_dim_qk);
      }
    }
    if (caps.max_head_dim > 0 && std::max(spec.head_dim_qk, spec.head_dim_vo) > caps.max_head_dim) {
      return concat("head_dim_qk and head_dim_vo must be at most ", caps.max_head_dim, ", got ", spec.head_dim_qk,
                    " and ", spec.head_dim_vo);
    }
    if (caps.head_dim_multiple > 1 &&
        (spec.head_dim_qk % caps.head_dim_multiple != 0 || spec.head_dim_vo % caps.head_dim_multiple != 0)) {
      return concat("head_dim_qk and head_dim_vo must be multiples of ", caps.head_dim_multiple, ", got ",
                    spec.head_dim_qk, " and ", spec.head_dim_vo);
    }
    if (!caps.gqa && spec.num_qo_heads != spec.num_kv_heads) {
      return concat("GQA/MQA is not supported (num_qo_heads ", spec.num_qo_heads, " != num_kv_heads ",
                    spec.num_kv_heads, ")");
    }
  }
  if (spec.causal && !caps.causal) return "causal masking is not supported";
  if (!spec.causal && !caps.non_causal) return "non-causal attention is not supported";
  if (spec.window_left >= 0 && !caps.window) return concat("sliding window is not supported (window_left ", spec.window_left, ")");
  if (spec.logits_soft_cap > 0 && !caps.soft_cap) return concat("logits soft-cap is not supported (", spec.logits_soft_cap, ")");
  if (!spec.sinks.empty() && !caps.sinks) return "attention sinks are not supported";
  if (!caps.variants && !spec.score_mod.empty()) return concat("score_mod is not supported ('", spec.score_mod, "')");
  if (!caps.variants && !spec.mask_mod.empty()) return concat("mask_mod is not supported ('", spec.mask_mod, "')");
  if (batch) {
    if (batch->mode == ForwardMode::extend && !caps.extend) return "extend batches are not supported";
    if (batch->mode == ForwardMode::decode && !caps.decode) return "decode batches are not supported";
    if (batch->mode == ForwardMode::mixed && !caps.mixed) return "mixed batches are not supported";
    if (!batch->custom_mask.empty() && !caps.custom_mask) return "custom masks are not supported";
  }
  return {};
}

}  // namespace attnkit
