// Host copy of new K/V rows into their slots, converting to the cache dtype (scaled for e4m3).
#include "core/store_kv.h"

#include <cstring>
#include <vector>

#include "attnkit/latent_fp8.h"

namespace attnkit {

namespace {
void store_rows(void* pool, DType pool_dtype, float scale, const TensorView& src,
                const int64_t* out_cache_loc, int64_t num_tokens) {
  const int64_t row = src.numel() / (num_tokens ? num_tokens : 1);  // elements of one token
  const bool same = src.dtype == pool_dtype && scale == 1.0f;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t slot = out_cache_loc[t];
    if (same) {
      const size_t bytes = static_cast<size_t>(row) * dtype_size(pool_dtype);
      std::memcpy(static_cast<char*>(pool) + slot * bytes, static_cast<const char*>(src.data) + t * bytes, bytes);
      continue;
    }
    for (int64_t e = 0; e < row; ++e) {
      const float x = load_as_float(src.data, src.dtype, t * row + e);
      store_from_float(pool, pool_dtype, slot * row + e, x / scale);
    }
  }
}
}  // namespace

void store_kv_cpu(const KvCacheConfig& config, void* k_pool, void* v_pool, const TensorView& k,
                  const TensorView& v, const int64_t* out_cache_loc, int64_t num_tokens) {
  if (config.latent_format == LatentFormat::fp8_blocked) {
    std::vector<float> values(static_cast<size_t>(config.head_dim_k));
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int e = 0; e < config.head_dim_k; ++e) values[static_cast<size_t>(e)] = load_as_float(k.data, k.dtype, t * config.head_dim_k + e);
      encode_fp8_blocked_latent(values.data(), config.head_dim_k, config.head_dim_v,
                                static_cast<uint8_t*>(k_pool) + out_cache_loc[t] * config.k_slot_bytes());
    }
    return;
  }
  const bool fp8 = config.dtype == DType::e4m3;
  store_rows(k_pool, config.dtype, fp8 ? config.k_scale : 1.0f, k, out_cache_loc, num_tokens);
  if (!config.mla) store_rows(v_pool, config.dtype, fp8 ? config.v_scale : 1.0f, v, out_cache_loc, num_tokens);
}

}  // namespace attnkit
