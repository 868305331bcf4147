// The extend kernel's configuration (tile shapes, shared-memory layout) and its copy side: the
// tile layout each MMA path reads, the page-table lookup, and the cp.async loads of K/V tiles.
// The mainloop that consumes them is prefill_kernel.cuh.
#pragma once

#include <cmath>

#include "backends/planned/kernels/prefill.h"
#include "backends/planned/kernels/prefill_tile.cuh"
#include "backends/planned/kernels/prefill_wgmma.cuh"

namespace attnkit::planned {

template <typename T_, typename TKv_, int kHeadDim_, int kNumWarps_, int kRowTiles_, int kBlockN_, int kMinBlocks_ = 1,
          bool kWgmma_ = false>
struct PrefillConfig {
  using T = T_;      // q, out and the shared K/V tiles: __nv_bfloat16 or __half
  using TKv = TKv_;  // cache element: T, or uint8_t for e4m3 (converted to T on the way to shared memory)
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kRowTiles = kRowTiles_;  // m16 row tiles per warp: more rows per K/V byte read
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kMinBlocks = kMinBlocks_;  // CTAs per SM the register budget must allow
  // Warpgroup MMA (sm_90a): each group of 4 warps computes 64 rows; else mma.sync per warp.
  static constexpr bool kWgmma = kWgmma_;
  static constexpr int kThreads = kNumWarps * 32;
  static constexpr int kBlockM = kNumWarps * kRowTiles * 16;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks in a row of T
  static constexpr bool kFp8 = sizeof(TKv) == 1;
  // A cache of another type than T (e4m3, or the other 16-bit type) is converted on its way in.
  static constexpr bool kConvert = !std::is_same_v<TKv, T>;
  // Q fragments stay in registers while they are few; else ldmatrix re-reads them each KV tile.
  static constexpr bool kQInRegs = !kWgmma && kRowTiles * kHeadDim <= 128;
  static constexpr int kTileBytes = kBlockN * kHeadDim * 2;
  // Q, 2 stages of K and V, and 2 stages of the tiles' cache slots (read from the page table ahead).
  static constexpr int kSmemBytes = kBlockM * kHeadDim * 2 + 4 * kTileBytes + 2 * kBlockN * 8;
  static_assert(kHeadDim % 16 == 0 && kBlockN % 16 == 0, "tiles are whole m16n8k16 steps");
  static_assert(kThreads % kChunks == 0, "each thread copies one fixed chunk column of a K/V tile");
  static_assert(kThreads >= kBlockN, "one thread looks up each KV row's slot");
  static_assert(!kWgmma || (kRowTiles == 1 && kNumWarps % 4 == 0 && kHeadDim <= 128 && kBlockN <= 128),
                "wgmma tiles: whole warpgroups of 64 rows, and N (KV tile, head dim) of at most 128");
};

namespace detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Byte offset of (row, 16-byte chunk) in a shared tile of kRows rows: wgmma needs the blocked
// 128-byte-swizzled layout; mma.sync keeps plain swizzled rows, whose addresses cost it fewer
// registers (measured: 0 against 308 bytes of spills at 4 warps x 32 rows).
template <typename C, int kRows>
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  if constexpr (C::kWgmma) {
    return tile::swizzle_blocked<kRows>(row, chunk);
  } else {
    return tile::swizzle<C::kHeadDim>(row, chunk);
  }
}

// Slot of KV position `pos` through the page table; -1 past kv_hi (the tile's tail).
__device__ __forceinline__ int64_t kv_slot(const PrefillParams& p, const int32_t* g_pages, int pos, int kv_hi) {
  if (pos >= kv_hi) return -1;
  return int64_t{g_pages[pos / p.page_size]} * p.page_size + pos % p.page_size;
}

// Copies KV positions [n0, n0 + kBlockN) of one head into the shared tiles s_k and s_v
// [kBlockN, kHeadDim]; s_slot [kBlockN] holds each row's cache slot (-1: past the end, zeros).
template <typename C>
__device__ __forceinline__ void load_kv_tiles(const PrefillParams& p, const typename C::TKv* g_k,
                                              const typename C::TKv* g_v, const int64_t* s_slot, int kv_head,
                                              typename C::T* s_k, typename C::T* s_v) {
  const int tid = threadIdx.x;
  if constexpr (!C::kConvert) {
    constexpr int kRowsPerPass = C::kThreads / C::kChunks;
    const int chunk = tid % C::kChunks;
    const uint32_t s_k_addr = tile::smem_addr(s_k);
    const uint32_t s_v_addr = tile::smem_addr(s_v);
#pragma unroll
    for (int r = tid / C::kChunks; r < C::kBlockN; r += kRowsPerPass) {
      const int64_t slot = s_slot[r];
      const bool valid = slot >= 0;
      const int64_t offset = valid ? (slot * p.num_kv_heads + kv_head) * C::kHeadDim + chunk * 8 : 0;
      const uint32_t s_off = tile_offset<C, C::kBlockN>(r, chunk);
      tile::cp_async_16(s_k_addr + s_off, g_k + offset, valid);
      tile::cp_async_16(s_v_addr + s_off, g_v + offset, valid);
    }
  } else {
    // 16 cache bytes become kOut 16-byte chunks of T (e4m3: 2, a 16-bit type: 1), in registers.
    constexpr int kOut = 2 / sizeof(typename C::TKv);
    constexpr int kGroups = C::kChunks / kOut;
    static_assert(C::kThreads % kGroups == 0, "each thread converts one fixed column of chunks");
    constexpr int kRowsPerPass = C::kThreads / kGroups;
    const int group = tid % kGroups;
#pragma unroll 2
    for (int r = tid / kGroups; r < C::kBlockN; r += kRowsPerPass) {
      const int64_t slot = s_slot[r];
      uint4 raw[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
      if (slot >= 0) {
        const int64_t offset = (slot * p.num_kv_heads + kv_head) * C::kHeadDim + group * (16 / sizeof(typename C::TKv));
        raw[0] = *reinterpret_cast<const uint4*>(g_k + offset);
        raw[1] = *reinterpret_cast<const uint4*>(g_v + offset);
      }
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        uint32_t out[4 * kOut];
        tile::convert16<typename C::T, typename C::TKv>(raw[kv], out);
        char* s_base = reinterpret_cast<char*>(kv == 0 ? s_k : s_v);
#pragma unroll
        for (int o = 0; o < kOut; ++o) {
          *reinterpret_cast<uint4*>(s_base + tile_offset<C, C::kBlockN>(r, kOut * group + o)) =
              make_uint4(out[4 * o], out[4 * o + 1], out[4 * o + 2], out[4 * o + 3]);
        }
      }
    }
  }
}

}  // namespace detail

}  // namespace attnkit::planned
