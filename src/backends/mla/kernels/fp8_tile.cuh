// The fp8_blocked latent cache in the narrow kernels: a stage of 64 raw slots (kv_cache.h: 512
// e4m3 values, 4 fp32 block scales, 64 bf16 RoPE values; kFp8SlotBytes apart) is dequantised by
// the compute warpgroup into the 128-byte-swizzled bf16 tile wgmma reads, one 64-value column
// block at a time, so that the tensor cores run the products of one block while the warps convert
// the next. A value is e4m3 x its block's scale, rounded once to bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/mla/config.h"

namespace attnkit::mla::fp8_tile {

constexpr int kThreads = 128;                       // the compute warpgroup converts
constexpr int kBlockBytes = kTileTokens * 128;      // one bf16 column block of the tile
constexpr int kRopeBlock = kHeadDimVo / 64;         // column block 8: the bf16 RoPE values, copied
constexpr int kTokensPerPass = kThreads / 8;        // 16: eight threads a token, 8 values each
static_assert(kLatentScaleBlock % 64 == 0, "a 64-value column block lies within one scale block");

// Two e4m3 (the low byte first) x scale -> two bf16 in one register.
__device__ __forceinline__ uint32_t e4m3x2_scaled(uint32_t bits, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// Column block cb of the tile from the raw slots: thread tid writes 16-byte chunk tid % 8 of
// tokens tid / 8 + 16 k (four independent conversions in flight); tokens past `valid` are zero.
__device__ __forceinline__ void dequantise_block(const unsigned char* raw, unsigned char* tile, int cb, int valid,
                                                 int tid) {
  const int c = tid % 8;
  const int t0 = tid / 8;
  uint4 v[kTileTokens / kTokensPerPass];
#pragma unroll
  for (int k = 0; k < kTileTokens / kTokensPerPass; ++k) {
    const unsigned char* slot = raw + (t0 + kTokensPerPass * k) * kFp8SlotBytes;
    if (cb == kRopeBlock) {
      v[k] = reinterpret_cast<const uint4*>(slot + kFp8RopeOffset)[c];
    } else {
      const uint2 e = *reinterpret_cast<const uint2*>(slot + cb * 64 + 8 * c);
      const float scale = reinterpret_cast<const float*>(slot + kHeadDimVo)[cb * 64 / kLatentScaleBlock];
      v[k] = make_uint4(e4m3x2_scaled(e.x, scale), e4m3x2_scaled(e.x >> 16, scale), e4m3x2_scaled(e.y, scale),
                        e4m3x2_scaled(e.y >> 16, scale));
    }
  }
  // Rows t0 + 16 k share t0 % 8: one swizzle for all four.
  unsigned char* dst = tile + cb * kBlockBytes + t0 * 128 + ((c ^ (t0 & 7)) << 4);
#pragma unroll
  for (int k = 0; k < kTileTokens / kTokensPerPass; ++k) {
    const bool in = t0 + kTokensPerPass * k < valid;
    *reinterpret_cast<uint4*>(dst + kTokensPerPass * k * 128) = in ? v[k] : make_uint4(0, 0, 0, 0);
  }
}

}  // namespace attnkit::mla::fp8_tile
