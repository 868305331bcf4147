// The `mla` narrow kernels' parts (narrow_kernel.cuh): the shared-memory layout and warp roles of
// each variant, the TMA producer, and the wgmma steps.
#pragma once

#include <cstdint>

#include "backends/mla/config.h"
#include "backends/mla/kernels/attend.h"
#include "backends/mla/kernels/hopper.cuh"
#include "cuda/wgmma.cuh"

namespace attnkit::mla::narrow_detail {

constexpr int kColBlocks = kHeadDimQk / 64;            // 9 blocks of 64 values (128 bytes a row)
constexpr int kKBlockBytes = kTileTokens * 128;        // one column block of a 64-token tile
constexpr int kTileBytes = kColBlocks * kKBlockBytes;  // 73728: a bf16 tile
constexpr int kOutStride = kHeadDimVo + 4;  // floats a staged output row: padded against bank conflicts

constexpr int align_1k(int n) { return (n + 1023) / 1024 * 1024; }

// Warps 0-3 (one warpgroup) compute; the last warp is the TMA producer. Both caches use a ring of
// two bf16 tiles, which the compute warps read and release (tile empty).
//   bf16 cache: the producer fills the tiles, a column block at a time.
//   fp8_blocked cache: the producer brings raw slots, kFp8PieceTokens a piece, into a ring of
//     kRawStages; warps 4-11 (the converters) dequantise each piece into its half of a tile
//     (fp8_tile.cuh) while the compute warps work on the other tile, so the conversion runs beside
//     the products instead of before them.
// Shared memory at 16 rows, fp8: Q 18,432 + raw 3 x 20,992 (to 81,920) + tiles 2 x 73,728 + P
// 2,048 + reductions 256 + barriers = 231,888 bytes; at 32 rows two raw stages: 232,128 (the
// limit is 232,448).
template <int kN, bool kFp8>
struct Layout {
  static constexpr int kConverterWarps = kFp8 ? 8 : 0;
  static constexpr int kConverters = 32 * kConverterWarps;
  static constexpr int kProducerWarp = 4 + kConverterWarps;
  // fp8: four whole warpgroups (the producer's three other warps leave at once), so that setmaxnreg
  // can move registers: 128 a thread at launch (65,536 / 512); the producer's warpgroup gives 88
  // back (-> 40), the converters 32 each (-> 96), the compute warps take 112 (-> 240: O^T alone is
  // 8 x kN / 2 floats). 240 + 2 x 96 + 40 = 472 of the 512.
  static constexpr int kThreads = kFp8 ? 32 * (kProducerWarp + 4) : 32 * (kProducerWarp + 1);
  static constexpr int kProducerRegs = 40, kConverterRegs = 96, kComputeRegs = 240;
  static constexpr int kTiles = 2;
  static constexpr int kRawTokens = kFp8PieceTokens;  // slots a raw stage
  static constexpr int kPiecesPerTile = kTileTokens / kRawTokens;
  static constexpr int kRawStages = kFp8 ? (kN == 16 ? 3 : 2) : 0;
  static constexpr int kRawBytes = kRawTokens * kFp8SlotBytes;
  // Arrivals that fill a tile's column block: the TMA's one, or each converter warp's, each piece.
  static constexpr int kBlockArrivals = kFp8 ? kConverterWarps * kPiecesPerTile : 1;
  static constexpr int kQBlockBytes = kN * 128;
  static constexpr int kOffRaw = align_1k(kColBlocks * kQBlockBytes);        // Q first
  static constexpr int kOffTiles = align_1k(kOffRaw + kRawStages * kRawBytes);
  static constexpr int kOffP = kOffTiles + kTiles * kTileBytes;              // P^T: kN rows x 64 tokens
  static constexpr int kOffRed = kOffP + kN * 128;                           // [4 warps][kN] f32
  // mbarriers: tile full [kTiles][kColBlocks] (a column block each, so S^T starts on the first to
  // be filled), tile empty [kTiles], raw full [kRawStages], raw empty [kRawStages].
  static constexpr int kOffBar = kOffRed + 4 * kN * 4;
  static constexpr int kSmemBytes = kOffBar + (kTiles * kColBlocks + kTiles + 2 * kRawStages) * 8;
  static constexpr int kOffOut = kOffTiles;  // the epilogue stages O [kN][kOutStride] f32 in the first tile
  static_assert(kTileTokens % kRawTokens == 0, "a tile is whole raw pieces");
  static_assert(kN * kOutStride * 4 <= kTileBytes, "the staged output must fit in a tile");
  static_assert(kOffP % 1024 == 0, "tiles and P must start on 1024 bytes");
  static_assert(kSmemBytes <= 227 * 1024, "the kernel's shared memory exceeds the H100/H200 limit");
};

template <int kN, bool kFp8>
struct Barriers {
  using L = Layout<kN, kFp8>;
  uint32_t base;
  static constexpr int kFull = L::kTiles * kColBlocks;
  __device__ uint32_t tile_full(int t, int cb) const { return base + 8 * (t * kColBlocks + cb); }
  __device__ uint32_t tile_empty(int t) const { return base + 8 * (kFull + t); }
  __device__ uint32_t raw_full(int r) const { return base + 8 * (kFull + L::kTiles + r); }
  __device__ uint32_t raw_empty(int r) const { return base + 8 * (kFull + L::kTiles + L::kRawStages + r); }
};

// Byte offset of 16-byte chunk `chunk` of row `row` in 128-byte-swizzled column blocks of
// `block_bytes` (the rows of one 64-value column block, 8-row groups 1024 bytes apart).
__device__ __forceinline__ uint32_t swizzled(int block_bytes, int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * block_bytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ void compute_warps_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }

// The TMA warp: the item's KV in pieces of kPieceTokens slots, piece i into stage i % kStages
// once its consumers have released it (`empty`). Bf16: 64 x 576 tiles, 128-byte swizzled, each
// column block counted on its own barrier (full0 + 8 (stage x kColBlocks + block)); fp8: raw
// 656-byte slots, one barrier a stage (full0 + 8 stage). Boxes past the item's KV end are not
// loaded; a barrier expects exactly the bytes that are (none for a piece wholly past it).
template <int kStages, int kPieceTokens, bool kFp8>
__device__ __forceinline__ void produce(const void* map, const AttendParams& p, const WorkItem& w, uint32_t s_stages,
                                        int stage_bytes, uint32_t full0, uint32_t empty0, int lane) {
  const int box_rows = min(p.page_size, kPieceTokens);  // the tensor map's box (attend.cu)
  const int32_t* pages = p.page_indices + w.page_begin;
  constexpr int kBoxesPerRows = kFp8 ? 1 : kColBlocks;
  constexpr int kBytesPerRow = kFp8 ? kFp8SlotBytes : kColBlocks * 128;
  const int pieces = w.num_tiles * (kTileTokens / kPieceTokens);
  for (int i = 0; i < pieces; ++i) {
    const int s = i % kStages;
    if (i >= kStages) hopper::mbar_wait(empty0 + 8 * s, ((i / kStages) - 1) & 1);
    const int n0 = w.n0 + i * kPieceTokens;
    const int boxes = max(0, min(kPieceTokens / box_rows, (w.kv_hi - n0 + box_rows - 1) / box_rows));
    const uint32_t stage = s_stages + s * stage_bytes;
    const uint32_t full = full0 + 8 * (kFp8 ? s : s * kColBlocks);  // a block's: + 8 cb
    if constexpr (kFp8) {
      if (lane == 0) hopper::mbar_expect_tx(full, static_cast<uint32_t>(boxes * box_rows * kBytesPerRow));
    } else {
      if (lane < kColBlocks) hopper::mbar_expect_tx(full + 8 * lane, static_cast<uint32_t>(boxes * box_rows * 128));
    }
    __syncwarp();
    for (int idx = lane; idx < boxes * kBoxesPerRows; idx += 32) {
      const int b = idx % boxes;
      const int cb = idx / boxes;
      const int pos = n0 + b * box_rows;
      const int slot = pages[pos / p.page_size] * p.page_size + pos % p.page_size;
      if constexpr (kFp8) {
        hopper::load_2d(stage + b * box_rows * kFp8SlotBytes, map, 0, slot, full);
      } else {
        hopper::load_2d(stage + cb * kKBlockBytes + b * box_rows * 128, map, cb * 64, slot, full + 8 * cb);
      }
    }
  }
}

template <int kN>
__device__ __forceinline__ void wgmma_n(float (&d)[kN / 2], uint64_t a, uint64_t b, int scale_d) {
  if constexpr (kN == 16) hopper::wgmma_m64n16_ss<0>(d, a, b, scale_d);
  else hopper::wgmma_m64n32_ss<0>(d, a, b, scale_d);
}
template <int kN>
__device__ __forceinline__ void wgmma_n_ta(float (&d)[kN / 2], uint64_t a, uint64_t b) {
  if constexpr (kN == 16) hopper::wgmma_m64n16_ss<1>(d, a, b, 1);
  else hopper::wgmma_m64n32_ss<1>(d, a, b, 1);
}

// S^T's four k-steps over column block cb of the K tile; the first block's overwrites sc.
template <int kN>
__device__ __forceinline__ void s_block(float (&sc)[kN / 2], uint32_t s_k, uint32_t s_q, int cb, bool first) {
  const uint64_t k0 = cuda::wgmma::make_desc(s_k + cb * kKBlockBytes, 16, 1024);
  const uint64_t q0 = cuda::wgmma::make_desc(s_q + cb * kN * 128, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wgmma_n<kN>(sc, cuda::wgmma::advance_desc(k0, kk * 32), cuda::wgmma::advance_desc(q0, kk * 32), !first || kk > 0);
}

}  // namespace attnkit::mla::narrow_detail
