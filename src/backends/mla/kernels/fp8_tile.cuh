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
#include "cuda/e4m3_to_bf16.h"

namespace attnkit::mla::fp8_tile {

constexpr int kBlockBytes = kTileTokens * 128;  // one bf16 column block of the tile
constexpr int kRopeBlock = kHeadDimVo / 64;     // column block 8: the bf16 RoPE values, copied
constexpr int kChunksPerRow = kHeadDimQk / 8;   // 72 chunks of 8 values a token
static_assert(kLatentScaleBlock % 64 == 0, "a 64-value column block lies within one scale block");

// Two e4m3 (the low byte first) x scale -> two bf16 in one register, through the conversion unit,
// rounded once: for the chunks that moving bits cannot take.
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

// Eight e4m3 values of one slot's column block (the first in the low byte) and their block's scale.
struct RawChunk {
  uint2 bits;
  float scale;
};

// Whether moving bits cannot take the chunk: it holds a NaN (which would not carry over), or its
// scale would overflow the bf16 factor (latents of 114,240 or more).
__device__ __forceinline__ bool needs_conversion_unit(const RawChunk& r) {
  namespace cv = ::attnkit::cuda::e4m3_to_bf16;
  return cv::has_nan(r.bits.x) | cv::has_nan(r.bits.y) | !(r.scale < cv::kOneStepScaleLimit);  // no branches
}

// Eight e4m3 x scale -> eight bf16 by moving bits, then one bf16 multiply a pair by scale x 2^120
// rounded to bf16: two roundings where the conversion unit's path has one, so a value may land
// one bf16 step from value x scale (e4m3 itself is 2^-4 coarse); one conversion a chunk (the
// factor) where that path has eight.
__device__ __forceinline__ uint4 moved_bits_chunk(const RawChunk& r) {
  namespace cv = ::attnkit::cuda::e4m3_to_bf16;
  const __nv_bfloat162 f = __float2bfloat162_rn(r.scale * cv::kTwoPow120);
  uint4 v;
  cv::scaled_down_quad(r.bits.x, v.x, v.y);
  cv::scaled_down_quad(r.bits.y, v.z, v.w);
  return make_uint4(bf16x2_mul(v.x, f), bf16x2_mul(v.y, f), bf16x2_mul(v.z, f), bf16x2_mul(v.w, f));
}

__device__ __forceinline__ uint4 conversion_unit_chunk(const RawChunk& r) {
  return make_uint4(e4m3x2_scaled(r.bits.x, r.scale), e4m3x2_scaled(r.bits.x >> 16, r.scale),
                    e4m3x2_scaled(r.bits.y, r.scale), e4m3x2_scaled(r.bits.y >> 16, r.scale));
}

__device__ __forceinline__ uint32_t tile_offset(int cb, int row, int c) {
  return static_cast<uint32_t>(cb * kBlockBytes + row * 128 + ((c ^ (row & 7)) << 4));
}

// Rows [row0, row0 + kRows) of column blocks [cb, cb + kBlocks) of the bf16 tile, from kRows raw
// slots, by kConverters threads (ctid their index): each takes 16-byte chunks ctid + kConverters k
// (a warp's 32 chunks lie in one block: kConverters is a multiple of 32), up to kMaxInFlight read
// before any is converted; rows from `valid` on are zero. The RoPE block (kBlocks 1) is copied.
template <int kConverters, int kRows, int kMaxInFlight = 4, int kBlocks = 1>
__device__ __forceinline__ void dequantise(const unsigned char* raw, unsigned char* tile, int row0, int cb, int valid,
                                           int ctid) {
  constexpr int kBlockChunks = kRows * 8;
  constexpr int kChunks = kBlocks * kBlockChunks;
  static_assert(kConverters % 32 == 0 && kBlockChunks % 32 == 0, "a warp's chunks lie in one block");
  constexpr int kPerThread = (kChunks + kConverters - 1) / kConverters;
  constexpr int kInFlight = kPerThread < kMaxInFlight ? kPerThread : kMaxInFlight;
  // ctid < kConverters: where they divide the chunks evenly, every chunk a thread counts is live.
  auto live = [&](int k) { return k < kPerThread && (kChunks % kConverters == 0 || ctid + kConverters * k < kChunks); };
  auto block_of = [&](int k) { return cb + (ctid + kConverters * k) / kBlockChunks; };
  auto row_of = [&](int k) { return (ctid + kConverters * k) % kBlockChunks / 8; };
  auto dst_of = [&](int k) { return tile_offset(block_of(k), row0 + row_of(k), (ctid + kConverters * k) % 8); };
  if (kBlocks == 1 && cb == kRopeBlock) {  // the same block for the whole CTA: no divergence
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
      if (!live(k)) continue;
      const uint4 v = reinterpret_cast<const uint4*>(raw + row_of(k) * kFp8SlotBytes + kFp8RopeOffset)[(ctid + kConverters * k) % 8];
      *reinterpret_cast<uint4*>(tile + dst_of(k)) = row_of(k) < valid ? v : make_uint4(0, 0, 0, 0);
    }
    return;
  }
#pragma unroll
  for (int k0 = 0; k0 < kPerThread; k0 += kInFlight) {
    RawChunk r[kInFlight];
    bool slow = false;
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      if (!live(k0 + k)) continue;
      const unsigned char* slot = raw + row_of(k0 + k) * kFp8SlotBytes;
      const int blk = block_of(k0 + k);
      r[k].bits = *reinterpret_cast<const uint2*>(slot + blk * 64 + 8 * ((ctid + kConverters * (k0 + k)) % 8));
      r[k].scale = reinterpret_cast<const float*>(slot + kHeadDimVo)[blk * 64 / kLatentScaleBlock];
      // Stale rows past `valid` are zeroed below, whatever their bytes.
      slow = slow | (row_of(k0 + k) < valid & needs_conversion_unit(r[k]));
    }
    // One decision a warp, so that neither path branches chunk by chunk (the chunks' conversions
    // then interleave); almost always every warp moves bits.
    uint4 v[kInFlight];
    if (__any_sync(0xffffffffu, slow)) {
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (live(k0 + k)) v[k] = conversion_unit_chunk(r[k]);
    } else {
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (live(k0 + k)) v[k] = moved_bits_chunk(r[k]);
    }
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      if (live(k0 + k)) *reinterpret_cast<uint4*>(tile + dst_of(k0 + k)) = row_of(k0 + k) < valid ? v[k] : make_uint4(0, 0, 0, 0);
  }
}

}  // namespace attnkit::mla::fp8_tile
