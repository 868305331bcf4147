// The decode kernel's copy side: mbarrier wrappers, the work item loads, how one warp copies its
// 16 key rows of a K/V tile, and the query rows. The mainloop that consumes them is decode_kernel.cuh.
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

// The transpose of an 8x8 matrix of 16-bit values held one 32-bit pair a lane (lane 4r + c holds
// row r, columns 2c and 2c + 1): lane 4r + c receives column r's rows 2c and 2c + 1.
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// ---- work items ----

// Item idx of the plan as share `rep` of the KV heads runs it (DecodeParams::head_reps), with its
// request's page-table offset and (for the chunk that holds the step's new key) its end taken from
// this batch's arrays, not from the plan: a plan derived for the next decode step (each history one
// longer) is the last one's items unchanged.
__device__ __forceinline__ DecodeWorkItem load_item(const DecodeParams& p, int idx, int rep) {
  const int4* src = reinterpret_cast<const int4*>(p.items + idx);
  const int4 a = __ldg(src), b = __ldg(src + 1);
  const int2 c = __ldg(reinterpret_cast<const int2*>(src + 2));
  DecodeWorkItem it{a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, {0, 0}};
  it.kv_head_idx += rep * (p.num_kv_heads / p.head_reps);
  if (it.partial_idx >= 0) it.partial_idx += rep * p.rep_partials;
  it.page_begin = __ldg(p.page_begin + it.request_idx);
  if (it.owns_new_key != 0) {
    const int pages = __ldg(p.kv_page_indptr + it.request_idx + 1) - __ldg(p.kv_page_indptr + it.request_idx);
    it.kv_end = (pages - 1) * p.page_size + __ldg(p.kv_last_page_len + it.request_idx);
  }
  return it;
}

__device__ __forceinline__ int num_tiles(const DecodeWorkItem& it) {
  return (it.kv_end - it.kv_begin + kDecodeTileKv - 1) / kDecodeTileKv;
}

// ---- one warp's rows of a tile ----

// The key of row `row % 16` of the warp's 16 in tile `tile` of `it`. Keys past kv_end copy the
// item's last key again: those rows' scores are masked (P = 0), and a real cached row is finite
// where stale shared memory might hold a NaN (0 * NaN = NaN).
__device__ __forceinline__ int lane_key(const DecodeWorkItem& it, int tile, int warp, int row) {
  const int key = it.kv_begin + tile * kDecodeTileKv + warp * 16 + row % 16;
  return min(key, it.kv_end - 1);
}

// The page-table entry of the warp's row lane % 16 in the next tile, loaded a tile ahead of its use
// so the copies after it do not wait an L2 round trip (issue_rows shuffles it to the lanes that
// copy that row). Power-of-two pages (the usual case) cost a shift, not a division.
__device__ __forceinline__ int load_page(const DecodeParams& p, const DecodeWorkItem& it, int tile, int warp, int lane,
                                         int page_shift) {
  const int key = lane_key(it, tile, warp, lane);
  const int page_idx = page_shift >= 0 ? key >> page_shift : key / p.page_size;
  return __ldg(p.kv_page_indices + it.page_begin + page_idx);
}

// Where a cached row's 16-byte piece lies in a stage: swizzled where ldmatrix reads the stage,
// as in memory where the row is converted first (the converted copy is swizzled).
template <typename C>
__device__ __forceinline__ uint32_t stage_offset(int row, int chunk) {
  if constexpr (C::kConvert) {
    return static_cast<uint32_t>(row * C::kRowBytes + chunk * 16);
  } else {
    return tile::swizzle<C::kHeadDim>(row, chunk);
  }
}

// One half of a warp's rows of a tile: its 16 K rows (half 0) or 16 V rows (half 1), copied by all
// 32 lanes in 16-byte cp.async pieces, whole rows an instruction (so each instruction reads whole
// 256-byte rows), then one arrival a lane on the half's barrier of the stage. K and V are
// refilled separately: K's slot frees after Q K^T, half an iteration before V's.
// Why not one bulk copy (TMA) a row: a bulk copy into shared memory that is not 128-byte aligned
// cost 5% of the read rate on the H200 (bench/decode_read_bench.cu: 4.55 TB/s packed, 4.34 with
// rows padded by 16 bytes), and packed rows read by ldmatrix conflict 8 ways; 16-byte pieces
// can be placed swizzled (tile::swizzle), which costs neither.
// `page`: this lane's page-table entry for key lane % 16 of the tile (load_page).
template <typename C>
__device__ __forceinline__ void issue_rows(const DecodeParams& p, const DecodeWorkItem& it, int tile, int warp,
                                           int lane, int half, int page_shift, int page, uint32_t s_stage,
                                           uint32_t s_bar) {
  using TKv = typename C::TKv;
  constexpr int kChunks = C::kRowBytes / 16;  // 16-byte pieces a row
  constexpr int kRowsPerStep = 32 / kChunks;  // rows one instruction covers
  static_assert(kChunks <= 32 && 32 % kChunks == 0, "a row is a whole number of lanes' pieces");
  __syncwarp();  // every lane is done reading what this half held (the tile kStages before)
  const TKv* g_pool = static_cast<const TKv*>(half == 0 ? p.k_pool : p.v_pool);
  const int chunk = lane % kChunks;
  const uint32_t s_half = s_stage + half * C::kTileBytes;
  const int key0 = it.kv_begin + tile * kDecodeTileKv + warp * 16;
  const int in_page0 = page_shift >= 0 ? key0 & (p.page_size - 1) : key0 % p.page_size;
  // Where this kernel also stores the step's K/V, the chunk's last key comes from the input row.
  const bool new_from_input = p.new_k != nullptr && it.owns_new_key != 0;
  const TKv* g_new = nullptr;
  if (new_from_input) {
    g_new = static_cast<const TKv*>(half == 0 ? p.new_k : p.new_v) +
            (int64_t{it.token_idx} * p.num_kv_heads + it.kv_head_idx) * C::kHeadDim + chunk * (16 / sizeof(TKv));
  }
  if (key0 + 16 <= it.kv_end - (new_from_input ? 1 : 0) && in_page0 + 16 <= p.page_size) {
    // The usual case: the warp's 16 keys are consecutive slots of one page, so its rows lie a
    // constant stride apart and the copy loop is an address add and a copy a row.
    const int64_t row_stride = int64_t{p.num_kv_heads} * C::kHeadDim;
    const int64_t slot0 = int64_t{__shfl_sync(0xffffffffu, page, 0)} * p.page_size + in_page0;
    const TKv* g_src = g_pool + (slot0 + lane / kChunks) * row_stride + int64_t{it.kv_head_idx} * C::kHeadDim +
                       chunk * (16 / sizeof(TKv));
#pragma unroll
    for (int i = 0; i < 16 / kRowsPerStep; ++i) {
      const int row = i * kRowsPerStep + lane / kChunks;
      tile::cp_async_16(s_half + stage_offset<C>(warp * 16 + row, chunk), g_src + i * kRowsPerStep * row_stride, true);
    }
  } else {
#pragma unroll 2
    for (int i = 0; i < 16 / kRowsPerStep; ++i) {
      const int row = i * kRowsPerStep + lane / kChunks;  // 0..15, the warp's row of the tile
      const int row_page = __shfl_sync(0xffffffffu, page, row);
      const int key = lane_key(it, tile, warp, row);
      const int in_page = page_shift >= 0 ? key & (p.page_size - 1) : key % p.page_size;
      const int64_t slot = int64_t{row_page} * p.page_size + in_page;
      const TKv* g_src = new_from_input && key == it.kv_end - 1
                             ? g_new
                             : g_pool + (slot * p.num_kv_heads + it.kv_head_idx) * C::kHeadDim + chunk * (16 / sizeof(TKv));
      tile::cp_async_16(s_half + stage_offset<C>(warp * 16 + row, chunk), g_src, true);
    }
  }
  tile::cp_async_arrive(s_bar);
}

// This step's K and V rows of the item's KV head into the cache slot out_cache_loc[token], by the
// warp whose tile rows hold them (the item's last key, copied from the input into `s_stage`): from
// shared memory, so no load of the input stalls the item's end. Where the cache is converted the
// raw stage is already refilled, and the rows are copied from the input instead.
template <typename C>
__device__ __forceinline__ void store_new_rows(const DecodeParams& p, const DecodeWorkItem& it, int lane,
                                               const unsigned char* s_stage, int tile_row) {
  constexpr int kChunks = C::kRowBytes / 16;
  const int64_t src_row = (int64_t{it.token_idx} * p.num_kv_heads + it.kv_head_idx) * C::kRowBytes;
  const int64_t dst_row = (p.out_cache_loc[it.token_idx] * p.num_kv_heads + it.kv_head_idx) * C::kRowBytes;
  for (int idx = lane; idx < 2 * kChunks; idx += 32) {
    const int half = idx / kChunks, c = idx % kChunks;
    uint4 x;
    if constexpr (C::kConvert) {
      x = *reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(half ? p.new_v : p.new_k) + src_row + c * 16);
    } else {
      x = *reinterpret_cast<const uint4*>(s_stage + half * C::kTileBytes + stage_offset<C>(tile_row, c));
    }
    *reinterpret_cast<uint4*>(static_cast<unsigned char*>(half ? p.v_pool : p.k_pool) + dst_row + c * 16) = x;
  }
}

// The item's query rows into shared memory (swizzled like the extend kernel's tiles, so the 8 rows
// of one ldmatrix phase fall into 8 bank groups), rows past the slice's heads zero. The whole CTA
// copies: the rows are shared by its warps, and keeping them out of registers leaves those to the
// accumulators (with them in registers the head_dim 128 kernel spilled at 3 CTAs an SM).
template <typename C>
__device__ __forceinline__ void stage_q(const DecodeParams& p, const DecodeWorkItem& it, int group,
                                        unsigned char* s_q) {
  constexpr int kChunks = C::kHeadDim / 8;  // 16-byte chunks a row
  const int rows = min(C::kRows, group - it.row_begin);
  const uint4* g_q = reinterpret_cast<const uint4*>(
      static_cast<const typename C::T*>(p.q) +
      (int64_t{it.token_idx} * p.num_qo_heads + it.kv_head_idx * group + it.row_begin) * C::kHeadDim);
  for (int idx = threadIdx.x; idx < C::kRows * kChunks; idx += C::kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const uint4 v = r < rows ? __ldg(g_q + r * kChunks + c) : make_uint4(0u, 0u, 0u, 0u);
    *reinterpret_cast<uint4*>(s_q + tile::swizzle<C::kHeadDim>(r, c)) = v;
  }
}

}  // namespace attnkit::planned::decode_detail
