#include "attnkit/latent_fp8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "attnkit/dtype.h"
#include "attnkit/kv_cache.h"

namespace attnkit {

namespace {
constexpr float kE4m3Max = 448.0f;
}

void encode_fp8_blocked_latent(const float* values, int head_dim_k, int head_dim_v, uint8_t* slot) {
  const int blocks = head_dim_v / kLatentScaleBlock;
  uint8_t* scales = slot + head_dim_v;
  uint8_t* tail = scales + sizeof(float) * blocks;
  for (int b = 0; b < blocks; ++b) {
    const float* block = values + b * kLatentScaleBlock;
    float amax = 0.0f;
    for (int e = 0; e < kLatentScaleBlock; ++e) amax = std::max(amax, std::fabs(block[e]));
    const float scale = amax > 0.0f ? amax / kE4m3Max : 1.0f;
    // The quotient itself is rounded (not value * (1 / scale), which can land a step away).
    for (int e = 0; e < kLatentScaleBlock; ++e) slot[b * kLatentScaleBlock + e] = float_to_e4m3_bits(block[e] / scale);
    std::memcpy(scales + sizeof(float) * b, &scale, sizeof(float));  // the slot's scales need not be aligned
  }
  for (int e = head_dim_v; e < head_dim_k; ++e) {
    const uint16_t bits = float_to_bf16_bits(values[e]);
    std::memcpy(tail + 2 * (e - head_dim_v), &bits, 2);
  }
}

void decode_fp8_blocked_latent(const uint8_t* slot, int head_dim_k, int head_dim_v, float* values) {
  const int blocks = head_dim_v / kLatentScaleBlock;
  const uint8_t* scales = slot + head_dim_v;
  const uint8_t* tail = scales + sizeof(float) * blocks;
  for (int b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, scales + sizeof(float) * b, sizeof(float));
    for (int e = 0; e < kLatentScaleBlock; ++e) {
      values[b * kLatentScaleBlock + e] = e4m3_bits_to_float(slot[b * kLatentScaleBlock + e]) * scale;
    }
  }
  for (int e = head_dim_v; e < head_dim_k; ++e) {
    uint16_t bits;
    std::memcpy(&bits, tail + 2 * (e - head_dim_v), 2);
    values[e] = bf16_bits_to_float(bits);
  }
}

}  // namespace attnkit
