// The fp8_blocked latent cache in the narrow kernels: raw slots (kv_cache.h: 512 e4m3 values,
// 4 fp32 block scales, 64 bf16 RoPE values; kFp8SlotBytes apart) dequantised into the
// 128-byte-swizzled bf16 tile wgmma reads. A value is e4m3 x its block's scale in bf16; the RoPE
// values are copied. The e4m3 bytes become bf16 by moving bits (e4m3_to_bf16.h) and one bf16
// multiply a pair applies the scale: no conversion instruction, where the SM's conversion unit
// bounded the old path (e4m3 -> f16 -> f32 -> bf16, two of its conversions a pair of values).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backends/mla/config.h"
#include "backends/mla/kernels/e4m3_to_bf16.h"

namespace attnkit::mla::fp8_tile {

constexpr int kBlockBytes = kTileTokens * 128;  // one bf16 column block of the tile
constexpr int kRopeBlock = kHeadDimVo / 64;     // column block 8: the bf16 RoPE values, copied
constexpr int kChunksPerRow = kHeadDimQk / 8;   // 72 chunks of 8 values a token
static_assert(kLatentScaleBlock % 64 == 0, "a 64-value column block lies within one scale block");

// Two e4m3 (the low byte first) x scale -> two bf16 in one register, through the conversion unit,
// rounded once: for the chunks dequantise_chunk cannot take by moving bits.
__device__ __forceinline__ uint32_t e4m3x2_scaled(uint32_t bits, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
  return *reinterpret_cast<const uint32_t*>(&b);
}

__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, __nv_bfloat162 b) {
  const __nv_bfloat162 p = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&a), b);
  return *reinterpret_cast<const uint32_t*>(&p);
}

// Eight e4m3 (`e`, the first in the low byte) x scale -> eight bf16. By moving bits and one bf16
// multiply a pair by scale x 2^120 rounded to bf16: two roundings where the conversion unit's path
// has one, so a value may land one bf16 step from value x scale (e4m3 itself is 2^-4 coarse). A
// chunk holding a NaN, or whose scale would overflow the factor, converts the other way.
__device__ __forceinline__ uint4 dequantise_chunk(uint2 e, float scale) {
  namespace cv = e4m3_to_bf16;
  if (!cv::has_nan(e.x) && !cv::has_nan(e.y) && scale < cv::kOneStepScaleLimit) {
    const __nv_bfloat162 f = __float2bfloat162_rn(scale * cv::kTwoPow120);
    return make_uint4(bf16x2_mul(cv::scaled_down_pair(e.x), f), bf16x2_mul(cv::scaled_down_pair(e.x >> 16), f),
                      bf16x2_mul(cv::scaled_down_pair(e.y), f), bf16x2_mul(cv::scaled_down_pair(e.y >> 16), f));
  }
  return make_uint4(e4m3x2_scaled(e.x, scale), e4m3x2_scaled(e.x >> 16, scale), e4m3x2_scaled(e.y, scale),
                    e4m3x2_scaled(e.y >> 16, scale));
}

// Chunk c (8 values) of one raw slot, dequantised (a RoPE chunk copied); zero where !valid.
__device__ __forceinline__ uint4 chunk_of(const unsigned char* slot, int cb, int c, bool valid) {
  uint4 v;
  if (cb == kRopeBlock) {
    v = reinterpret_cast<const uint4*>(slot + kFp8RopeOffset)[c];
  } else {
    const uint2 e = *reinterpret_cast<const uint2*>(slot + cb * 64 + 8 * c);
    const float scale = reinterpret_cast<const float*>(slot + kHeadDimVo)[cb * 64 / kLatentScaleBlock];
    v = dequantise_chunk(e, scale);
  }
  return valid ? v : make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ uint32_t tile_offset(int cb, int row, int c) {
  return static_cast<uint32_t>(cb * kBlockBytes + row * 128 + ((c ^ (row & 7)) << 4));
}

// Rows [row0, row0 + kRows) of the bf16 tile from kRows raw slots, column blocks
// [cb0, cb0 + kBlocks), by kConverters threads (ctid their index): each takes 16-byte chunks
// ctid + kConverters k, numbered block by block (a warp's 32 chunks lie in one block: kConverters
// is a multiple of 32, a block's rows kRows x 8 chunks), up to kMaxInFlight converted between
// stores; rows from `valid` on are zero.
template <int kConverters, int kRows, int kBlocks, int kMaxInFlight = 4>
__device__ __forceinline__ void dequantise(const unsigned char* raw, unsigned char* tile, int row0, int cb0, int valid,
                                           int ctid) {
  constexpr int kChunks = kBlocks * kRows * 8;
  static_assert(kConverters % 32 == 0 && (kRows * 8) % 32 == 0, "a warp's chunks lie in one block");
  constexpr int kPerThread = (kChunks + kConverters - 1) / kConverters;
  constexpr int kInFlight = kPerThread < kMaxInFlight ? kPerThread : kMaxInFlight;
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
      const int cb = cb0 + q / (kRows * 8);
      const int t = (q / 8) % kRows;
      const int c = q % 8;
      v[k] = chunk_of(raw + t * kFp8SlotBytes, cb, c, t < valid);
      dst[k] = tile_offset(cb, row0 + t, c);
    }
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      if (live[k]) *reinterpret_cast<uint4*>(tile + dst[k]) = v[k];
  }
}

}  // namespace attnkit::mla::fp8_tile
