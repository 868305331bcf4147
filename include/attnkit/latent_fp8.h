// The fp8_blocked MLA latent slot (kv_cache.h: LatentFormat), written and read in one place: the
// host store, `reference`, `cpu` and the benchmark's pool fill use these, and an engine that writes
// slots itself can; the device store matches them byte for byte (tests/backends/reference/
// fp8_blocked_latent_test.cc holds hand-computed slots).
#pragma once

#include <cstdint>

namespace attnkit {

// `values` [head_dim_k] into `slot` (KvCacheConfig::k_slot_bytes() bytes): each block of 128 of
// the first head_dim_v values scaled by its largest magnitude / 448 (1 for an all-zero block) and
// rounded to the nearest e4m3 of value / scale, then the scales (fp32), then the rest as bf16.
void encode_fp8_blocked_latent(const float* values, int head_dim_k, int head_dim_v, uint8_t* slot);
// The values a slot holds: e4m3 x its block's scale, and the bf16 tail.
void decode_fp8_blocked_latent(const uint8_t* slot, int head_dim_k, int head_dim_v, float* values);

}  // namespace attnkit
