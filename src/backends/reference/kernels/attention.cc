// fp64 attention over the paged cache, one request and query head at a time.
#include "backends/reference/kernels/attention.h"

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "attnkit/latent_fp8.h"
#include "core/variant_expr.h"

namespace attnkit::reference {

bool is_visible(const AttentionSpec& spec, const ForwardBatch& batch, int request_idx, int qo_idx, int64_t kv_idx) {
  const int64_t q_pos = batch.prefix_lens[request_idx] + qo_idx;
  if (batch.has_custom_mask(request_idx)) {
    const int64_t kv_len = batch.kv_len(request_idx);
    if (!batch.custom_mask[batch.custom_mask_indptr[request_idx] + qo_idx * kv_len + kv_idx]) return false;
  } else if (spec.causal && kv_idx > q_pos) {
    return false;
  }
  return spec.window_left < 0 || kv_idx >= q_pos - spec.window_left;
}

namespace {

// Gathers one request's K or V rows of one KV head into fp64, dequantised.
void gather(const AttentionParams& p, const void* pool, int64_t row_elems, int64_t head_offset, int dim, float scale,
            int request_idx, std::vector<double>& dst) {
  const ForwardBatch& b = *p.batch;
  const int kv_len = b.kv_len(request_idx);
  dst.resize(static_cast<size_t>(kv_len) * dim);
  const KvCacheConfig& c = *p.cache;
  if (c.latent_format == LatentFormat::fp8_blocked) {  // each slot's values through its block scales
    std::vector<float> latent(static_cast<size_t>(c.head_dim_k));
    for (int t = 0; t < kv_len; ++t) {
      decode_fp8_blocked_latent(static_cast<const uint8_t*>(pool) + b.slot(request_idx, t) * c.k_slot_bytes(), c.head_dim_k,
                                c.head_dim_v, latent.data());
      for (int e = 0; e < dim; ++e) dst[static_cast<size_t>(t) * dim + e] = double{latent[static_cast<size_t>(e)]};
    }
    return;
  }
  for (int t = 0; t < kv_len; ++t) {
    const int64_t base = b.slot(request_idx, t) * row_elems + head_offset;
    for (int e = 0; e < dim; ++e) {
      dst[static_cast<size_t>(t) * dim + e] = double{load_as_float(pool, p.cache->dtype, base + e)} * scale;
    }
  }
}

}  // namespace

void attention(const AttentionParams& p) {
  const AttentionSpec& spec = *p.spec;
  const KvCacheConfig& c = *p.cache;
  const ForwardBatch& b = *p.batch;
  const int dk = spec.head_dim_qk;
  const int dv = spec.head_dim_vo;
  const int group = spec.group_size();
  const double scale = spec.scale();
  const double cap = spec.logits_soft_cap;
  const bool fp8 = c.dtype == DType::e4m3;  // fp8_blocked: the block scales, in gather
  const float k_scale = fp8 ? c.k_scale : 1.0f;
  // An MLA latent is one tensor with one scale: its V half (the first head_dim_v values) is read
  // with k_scale, as it was stored.
  const float v_scale = fp8 ? (c.mla ? c.k_scale : c.v_scale) : 1.0f;
  const int64_t k_row = int64_t{c.num_kv_heads} * c.head_dim_k;
  const int64_t v_row = c.mla ? c.head_dim_k : int64_t{c.num_kv_heads} * c.head_dim_v;
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  // User-defined variants: evaluated in float on the inputs a kernel sees (core/variant_expr.h).
  const std::optional<VariantExpr> score_mod =
      spec.score_mod.empty() ? std::nullopt : std::optional(VariantExpr::parse(spec.score_mod, "score_mod"));
  const std::optional<VariantExpr> mask_mod =
      spec.mask_mod.empty() ? std::nullopt : std::optional(VariantExpr::parse(spec.mask_mod, "mask_mod"));
  VariantInputs vin;

  std::vector<double> k, v, scores, q_row(static_cast<size_t>(dk));
  for (int i = 0; i < b.batch_size(); ++i) {
    const int kv_len = b.kv_len(i);
    for (int kv_head = 0; kv_head < spec.num_kv_heads; ++kv_head) {
      gather(p, p.k_pool, k_row, int64_t{kv_head} * c.head_dim_k, dk, k_scale, i, k);
      gather(p, p.v_pool, v_row, c.mla ? 0 : int64_t{kv_head} * c.head_dim_v, dv, v_scale, i, v);
      for (int j = 0; j < b.qo_len(i); ++j) {
        const int64_t token = b.qo_indptr[i] + j;
        for (int h = kv_head * group; h < (kv_head + 1) * group; ++h) {
          const int64_t q_base = (token * spec.num_qo_heads + h) * dk;
          for (int e = 0; e < dk; ++e) q_row[static_cast<size_t>(e)] = load_as_float(p.q, p.q_dtype, q_base + e);
          // S = q K^T * scale, soft-capped, masked.
          scores.assign(static_cast<size_t>(kv_len), kNegInf);
          double m = kNegInf;
          vin.head = h;
          vin.kv_head = kv_head;
          vin.request = i;
          vin.q_len = b.qo_len(i);
          vin.kv_len = kv_len;
          vin.q_pos = static_cast<int32_t>(b.prefix_lens[i] + j);
          for (int t = 0; t < kv_len; ++t) {
            if (!is_visible(spec, b, i, j, t)) continue;
            vin.kv_pos = t;
            if (mask_mod && !mask_mod->eval_bool(vin)) continue;
            double s = 0.0;
            const double* k_row_t = k.data() + static_cast<size_t>(t) * dk;
            for (int e = 0; e < dk; ++e) s += q_row[static_cast<size_t>(e)] * k_row_t[e];
            s *= scale;
            if (cap > 0.0) s = cap * std::tanh(s / cap);
            if (score_mod) {
              vin.score = static_cast<float>(s);
              s = score_mod->eval_float(vin);
            }
            scores[static_cast<size_t>(t)] = s;
            m = std::max(m, s);
          }
          // P = softmax(S) with the sink in the denominator; O = P V.
          const int64_t o_base = (token * spec.num_qo_heads + h) * dv;
          std::vector<double> acc(static_cast<size_t>(dv), 0.0);
          double denom = 0.0;
          if (m != kNegInf) {
            for (int t = 0; t < kv_len; ++t) {
              if (scores[static_cast<size_t>(t)] == kNegInf) continue;
              const double w = std::exp(scores[static_cast<size_t>(t)] - m);
              denom += w;
              for (int e = 0; e < dv; ++e) acc[static_cast<size_t>(e)] += w * v[static_cast<size_t>(t) * dv + e];
            }
          }
          if (p.lse) p.lse[token * spec.num_qo_heads + h] = static_cast<float>(m == kNegInf ? kNegInf : m + std::log(denom));
          double total = denom;
          if (!spec.sinks.empty() && m != kNegInf) total += std::exp(double{spec.sinks[static_cast<size_t>(h)]} - m);
          for (int e = 0; e < dv; ++e) {
            // A fully masked row has nothing to average: zeros, never 0/0.
            const double o = total > 0.0 ? acc[static_cast<size_t>(e)] / total : 0.0;
            store_from_float(p.out, p.out_dtype, o_base + e, static_cast<float>(o));
          }
        }
      }
    }
  }
}

}  // namespace attnkit::reference
