// The extend kernel's producer side: the work item's rows and KV range, the shared-memory layout,
// and the two-stage cp.async pipeline that feeds the mainloop: the Q tile, the cache slots looked
// up two tiles ahead, and each K/V tile's load, wait and barrier. The copies themselves are
// prefill_copy.cuh; the math that consumes the tiles is prefill_mainloop.cuh.
#pragma once

#include "backends/planned/kernels/prefill_copy.cuh"

namespace attnkit::planned::prefill_detail {

// This thread's warp and lane in the CTA (signed, as every index of the kernel is).
__device__ __forceinline__ int thread_warp() {
  const int tid = threadIdx.x;
  return tid / 32;
}
__device__ __forceinline__ int thread_lane() {
  const int tid = threadIdx.x;
  return tid % 32;
}

// One work item as the CTA sees it: its q tile's GQA-packed rows of one request and the KV
// positions [kv_lo, kv_hi) those rows may see, walked in num_tiles tiles of kBlockN. Whether the
// request has a custom mask is kept beside it, in a register of its own.
struct PrefillItem {
  int req, group, qo_start, qo_len, page_begin, kv_len, prefix, row0, rows_here;
  int pos_min, pos_max, kv_lo, kv_hi, num_tiles;
};

// The item's rows from the batch arrays; false where the q tile holds none (nothing else is read).
template <typename C>
__device__ __forceinline__ bool init_rows(const PrefillParams& p, const PrefillWorkItem& w, PrefillItem& it) {
  it.req = w.request_idx;
  it.group = p.num_qo_heads / p.num_kv_heads;
  it.qo_start = p.qo_indptr[it.req];
  it.qo_len = p.qo_indptr[it.req + 1] - it.qo_start;
  it.page_begin = p.page_begin[it.req];
  const int num_pages = p.kv_page_indptr[it.req + 1] - p.kv_page_indptr[it.req];
  it.kv_len = num_pages == 0 ? 0 : (num_pages - 1) * p.page_size + p.kv_last_page_len[it.req];
  it.prefix = p.prefix_lens[it.req];
  const int packed_len = it.qo_len * it.group;
  it.row0 = w.qo_tile_idx * C::kBlockM;
  it.rows_here = min(C::kBlockM, packed_len - it.row0);
  return it.rows_here > 0;
}

// The KV positions the item's rows may see: its split's range, cut by the causal mask (unless the
// request has a custom mask) and the window.
template <typename C>
__device__ __forceinline__ void init_kv_range(const PrefillParams& p, const PrefillWorkItem& w, bool custom,
                                              PrefillItem& it) {
  constexpr int kN = C::kBlockN;
  it.pos_min = it.prefix + it.row0 / it.group;
  it.pos_max = it.prefix + (it.row0 + it.rows_here - 1) / it.group;
  it.kv_lo = w.kv_begin;
  it.kv_hi = w.kv_end < 0 ? it.kv_len : min(w.kv_end, it.kv_len);
  if (!custom && p.causal) it.kv_hi = min(it.kv_hi, it.pos_max + 1);
  if (p.window_left >= 0) it.kv_lo = max(it.kv_lo, it.pos_min - p.window_left);
  it.num_tiles = it.kv_hi > it.kv_lo ? (it.kv_hi - it.kv_lo + kN - 1) / kN : 0;
}

// Where the item's K/V rows come from: the pools and the request's page-table entries.
template <typename C>
struct PrefillKvSource {
  using TKv = typename C::TKv;
  const TKv* k;
  const TKv* v;
  const int32_t* pages;
  __device__ __forceinline__ PrefillKvSource(const PrefillParams& p, const PrefillItem& it)
      : k(static_cast<const TKv*>(p.k_pool)),
        v(static_cast<const TKv*>(p.v_pool)),
        pages(p.kv_page_indices + it.page_begin) {}
};

// The dynamic shared memory: Q [kBlockM, kD], two stages of K and of V [kN, kD], and two stages
// of the tiles' cache slots [kN].
template <typename C>
struct PrefillSmem {
  using T = typename C::T;
  T* q;
  T* k;
  T* v;
  int64_t* slot;
  __device__ __forceinline__ explicit PrefillSmem(unsigned char* smem)
      : q(reinterpret_cast<T*>(smem)),
        k(reinterpret_cast<T*>(smem + C::kBlockM * C::kHeadDim * 2)),
        v(reinterpret_cast<T*>(smem + C::kBlockM * C::kHeadDim * 2 + 2 * C::kTileBytes)),
        slot(reinterpret_cast<int64_t*>(smem + C::kBlockM * C::kHeadDim * 2 + 4 * C::kTileBytes)) {}
};

// The Q tile, one cp.async group: packed row r is token (row0 + r) / group, head
// kv_head * group + (row0 + r) % group; rows past the item's end are zero.
template <typename C>
__device__ __forceinline__ void load_q_tile(const PrefillParams& p, const PrefillItem& it, int kv_head,
                                            const PrefillSmem<C>& sm) {
  using T = typename C::T;
  const int tid = threadIdx.x;
  const T* g_q = static_cast<const T*>(p.q);
  for (int idx = tid; idx < C::kBlockM * C::kChunks; idx += C::kThreads) {
    const int r = idx / C::kChunks;
    const int chunk = idx % C::kChunks;
    const int packed = it.row0 + r;
    const bool valid = r < it.rows_here;
    const T* src = g_q;
    if (valid) {
      const int64_t token = it.qo_start + packed / it.group;
      const int head = kv_head * it.group + packed % it.group;
      src = g_q + (token * p.num_qo_heads + head) * C::kHeadDim + chunk * 8;
    }
    tile::cp_async_16(tile::smem_addr(sm.q) + detail::tile_offset<C, C::kBlockM>(r, chunk), src, valid);
  }
  tile::cp_async_commit();
}

// K/V tile `j` of the item (its slots already in stage j % 2) into stage j % 2.
template <typename C>
__device__ __forceinline__ void load_tile(const PrefillParams& p, const PrefillKvSource<C>& src, int kv_head,
                                          const PrefillSmem<C>& sm, int j) {
  const int stage = j & 1;
  detail::load_kv_tiles<C>(p, src.k, src.v, sm.slot + stage * C::kBlockN, kv_head, sm.k + stage * C::kBlockN * C::kHeadDim,
                           sm.v + stage * C::kBlockN * C::kHeadDim);
  tile::cp_async_commit();
}

// The slots of tiles 0 and 1, then tile 0's loads; later tiles' slots are looked up one tile
// ahead, inside the loop, so no cp.async waits on a page-table read.
template <typename C>
__device__ __forceinline__ void load_first_tile(const PrefillParams& p, const PrefillItem& it,
                                                const PrefillKvSource<C>& src, int kv_head, const PrefillSmem<C>& sm) {
  constexpr int kN = C::kBlockN;
  const int tid = threadIdx.x;
  if (tid < kN) {
    sm.slot[tid] = detail::kv_slot(p, src.pages, it.kv_lo + tid, it.kv_hi);
    sm.slot[kN + tid] = detail::kv_slot(p, src.pages, it.kv_lo + kN + tid, it.kv_hi);
  }
  __syncthreads();
  if (it.num_tiles > 0) load_tile<C>(p, src, kv_head, sm, 0);
}

// Tile j has landed: its loads are complete and visible (to wgmma's async proxy as well), and
// past the barrier every warp is done with tile j - 1's buffers.
template <typename C>
__device__ __forceinline__ void wait_tile() {
  tile::cp_async_wait<0>();
  if constexpr (C::kWgmma) wgmma::fence_proxy_async();
  __syncthreads();
}

// Tile j + 1 into the other stage, while tile j is computed.
template <typename C>
__device__ __forceinline__ void load_next_tile(const PrefillParams& p, const PrefillItem& it,
                                               const PrefillKvSource<C>& src, int kv_head, const PrefillSmem<C>& sm,
                                               int j) {
  if (j + 1 < it.num_tiles) load_tile<C>(p, src, kv_head, sm, j + 1);
}

// Tile j + 2's slot of this thread's row (tile j starts at n0): the page-table read is issued
// now and stored after tile j's math (store_slot), into the stage tile j used.
template <typename C>
__device__ __forceinline__ int64_t fetch_slot(const PrefillParams& p, const PrefillItem& it,
                                              const PrefillKvSource<C>& src, int j, int n0) {
  const int tid = threadIdx.x;
  int64_t next_slot = -1;
  if (tid < C::kBlockN && j + 2 < it.num_tiles)
    next_slot = detail::kv_slot(p, src.pages, n0 + 2 * C::kBlockN + tid, it.kv_hi);
  return next_slot;
}

template <typename C>
__device__ __forceinline__ void store_slot(const PrefillItem& it, const PrefillSmem<C>& sm, int j, int64_t next_slot) {
  const int tid = threadIdx.x;
  if (tid < C::kBlockN && j + 2 < it.num_tiles) sm.slot[(j & 1) * C::kBlockN + tid] = next_slot;
}

}  // namespace attnkit::planned::prefill_detail
