// The decode kernel's copy side: mbarrier and bulk-copy (TMA, cp.async.bulk) wrappers, the work
// item loads, and how one warp copies its 16 key rows of a K/V tile and its query fragments. The
// mainloop that consumes them is decode_kernel.cuh.
#pragma once

#include <cstdint>

#include "backends/planned/kernels/decode.h"
#include "backends/planned/kernels/prefill_tile.cuh"

namespace attnkit::planned::decode_detail {

// ---- mbarrier and bulk copy (sm_90) ----

__device__ __forceinline__ void mbar_init(uint32_t s_bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(s_bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the copy engine, which completes transactions on them.
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t s_bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t s_bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(s_bar), "r"(parity)
        : "memory");
  } while (done == 0);
}
// `bytes` (a multiple of 16) global -> shared by the copy engine; completes on s_bar's transaction
// count. Both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_copy(uint32_t s_dst, const void* g_src, int bytes, uint32_t s_bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(s_dst),
               "l"(g_src), "r"(bytes), "r"(s_bar)
               : "memory");
}
// Shared memory written by ordinary stores must be fenced before the copy engine writes it again.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// ---- work items ----

__device__ __forceinline__ DecodeWorkItem load_item(const DecodeWorkItem* g_items, int idx) {
  const int4* src = reinterpret_cast<const int4*>(g_items + idx);
  const int4 a = __ldg(src), b = __ldg(src + 1);
  return {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
}

__device__ __forceinline__ int num_tiles(const DecodeWorkItem& it) {
  return (it.kv_end - it.kv_begin + kDecodeTileKv - 1) / kDecodeTileKv;
}

// ---- one warp's rows of a tile ----

// The key a lane copies in tile `tile` of `it`: lanes 0-15 copy K, 16-31 V of the warp's 16 rows.
// Keys past kv_end copy the item's last key again: those rows' scores are masked (P = 0), and a
// real cached row is finite where stale shared memory might hold a NaN (0 * NaN = NaN).
__device__ __forceinline__ int lane_key(const DecodeWorkItem& it, int tile, int warp, int lane) {
  const int key = it.kv_begin + tile * kDecodeTileKv + warp * 16 + lane % 16;
  return min(key, it.kv_end - 1);
}

// The page-table entry of this lane's next row, loaded a tile ahead of its use so the copy after it
// does not wait an L2 round trip. Power-of-two pages (the usual case) cost a shift, not a division.
__device__ __forceinline__ int load_page(const DecodeParams& p, const DecodeWorkItem& it, int tile, int warp, int lane,
                                         int page_shift) {
  const int key = lane_key(it, tile, warp, lane);
  const int page_idx = page_shift >= 0 ? key >> page_shift : key / p.page_size;
  return __ldg(p.kv_page_indices + it.page_begin + page_idx);
}

// One bulk copy a lane: row `warp * 16 + lane % 16` of K (lanes 0-15) or V (16-31) into the stage,
// rows kRowStride apart. Lane 0 first announces the warp's bytes on the warp's barrier of the stage.
template <typename C>
__device__ __forceinline__ void issue_rows(const DecodeParams& p, const DecodeWorkItem& it, int tile, int warp,
                                           int lane, int page_shift, int page, uint32_t s_stage, uint32_t s_bar) {
  using TKv = typename C::TKv;
  __syncwarp();  // every lane is done reading what this stage held (the tile kStages before)
  if (lane == 0) mbar_arrive_expect_tx(s_bar, 32 * C::kRowBytes);
  __syncwarp();
  const int key = lane_key(it, tile, warp, lane);
  const int in_page = page_shift >= 0 ? key & (p.page_size - 1) : key % p.page_size;
  const int64_t slot = int64_t{page} * p.page_size + in_page;
  const TKv* g_pool = static_cast<const TKv*>(lane < 16 ? p.k_pool : p.v_pool);
  const TKv* g_row = g_pool + (slot * p.num_kv_heads + it.kv_head_idx) * C::kHeadDim;
  const uint32_t dst = s_stage + (lane / 16) * C::kTileBytes + (warp * 16 + lane % 16) * C::kRowStride;
  bulk_copy(dst, g_row, C::kRowBytes, s_bar);
}

// The item's query rows as the A fragments of m16n8k16 (rows past the slice's heads are zero),
// straight from global memory: issued before the wait for the item's first tile, they arrive
// during it, and no shared memory or barrier is spent on them.
template <typename C>
__device__ __forceinline__ void load_q(const DecodeParams& p, const DecodeWorkItem& it, int group, int lane,
                                       uint32_t (&r_q)[C::kHeadDim / 16][4]) {
  const int g = lane / 4, t = lane % 4;
  const int rows = min(C::kRows, group - it.row_begin);
  const uint32_t* g_q = reinterpret_cast<const uint32_t*>(
      static_cast<const typename C::T*>(p.q) +
      (int64_t{it.token_idx} * p.num_qo_heads + it.kv_head_idx * group + it.row_begin) * C::kHeadDim);
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i & 1);
      const int col = kk * 16 + 2 * t + 8 * (i >> 1);  // even: one 32-bit word holds two elements
      r_q[kk][i] = row < rows ? __ldg(g_q + (row * C::kHeadDim + col) / 2) : 0u;
    }
  }
}

}  // namespace attnkit::planned::decode_detail
