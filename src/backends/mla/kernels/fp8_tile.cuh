// The fp8_blocked latent cache in the narrow kernels: a stage of 64 raw slots (kv_cache.h: 512
// e4m3 values, 4 fp32 block scales, 64 bf16 RoPE values; kFp8SlotBytes apart) is dequantised by
// the converting warps into the 128-byte-swizzled bf16 tile wgmma reads, a batch of 64-value column
// blocks at a time, so that the tensor cores run the products of one batch while the warps convert
// the next. A value is e4m3 x its block's scale, rounded once to bf16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/mla/config.h"

namespace attnkit::mla::fp8_tile {

constexpr int kBlockBytes = kTileTokens * 128;      // one bf16 column block of the tile
constexpr int kRopeBlock = kHeadDimVo / 64;         // column block 8: the bf16 RoPE values, copied
static_assert(kLatentScaleBlock % 64 == 0, "a 64-value column block lies within one scale block");

// Two e4m3 (the low byte first) x scale -> two bf16 in one register.
__device__ __forceinline__ uint32_t e4m3x2_scaled(uint32_t bits, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// Column blocks [cb0, cb0 + kBlocks) of the tile from the raw slots, by kConverters threads
// (ctid their index): each takes 16-byte chunks ctid + kConverters k, a chunk being 8 values of
// one token (a warp's chunks lie in one block: kConverters is a multiple of 32 and a block 512
// chunks); tokens past `valid` are zero.
template <int kConverters, int kBlocks>
__device__ __forceinline__ void dequantise_blocks(const unsigned char* raw, unsigned char* tile, int cb0, int valid,
                                                  int ctid) {
  constexpr int kChunks = kBlocks * kTileTokens * 8;
  static_assert(kConverters % 32 == 0, "whole warps convert");
  constexpr int kPerThread = (kChunks + kConverters - 1) / kConverters;
  constexpr int kInFlight = kPerThread < 4 ? kPerThread : 4;  // conversions between stores
#pragma unroll
  for (int k0 = 0; k0 < kPerThread; k0 += kInFlight) {
    uint4 v[kInFlight];
    uint32_t dst[kInFlight];
    bool live[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int q = ctid + kConverters * (k0 + k);
      live[k] = k0 + k < kPerThread && q < kChunks;
      if (!live[k]) continue;
      const int cb = cb0 + q / (kTileTokens * 8);
      const int t = (q / 8) % kTileTokens;
      const int c = q % 8;
      const unsigned char* slot = raw + t * kFp8SlotBytes;
      if (cb == kRopeBlock) {
        v[k] = reinterpret_cast<const uint4*>(slot + kFp8RopeOffset)[c];
      } else {
        const uint2 e = *reinterpret_cast<const uint2*>(slot + cb * 64 + 8 * c);
        const float scale = reinterpret_cast<const float*>(slot + kHeadDimVo)[cb * 64 / kLatentScaleBlock];
        v[k] = make_uint4(e4m3x2_scaled(e.x, scale), e4m3x2_scaled(e.x >> 16, scale), e4m3x2_scaled(e.y, scale),
                          e4m3x2_scaled(e.y >> 16, scale));
      }
      if (t >= valid) v[k] = make_uint4(0, 0, 0, 0);
      dst[k] = static_cast<uint32_t>(cb * kBlockBytes + t * 128 + ((c ^ (t & 7)) << 4));
    }
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      if (live[k]) *reinterpret_cast<uint4*>(tile + dst[k]) = v[k];
  }
}

}  // namespace attnkit::mla::fp8_tile
