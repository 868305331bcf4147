// The `hopper` extend kernel's producer: one warp of the first warpgroup issues every copy with
// the TMA. Per tile: Q once (one box a column block: tokens x group rows), then each K and V tile
// into the next ring stage as soon as the consumers have released it, a box of min(page_size,
// kBlockN) tokens a lane, the page table read a tile ahead. Completion is counted in bytes on
// the stage's full barrier; kernel.cuh sets the roles up.
#pragma once

#include "backends/hopper/kernels/config.cuh"
#include "backends/hopper/kernels/scheduler.cuh"
#include "cuda/tma.cuh"

namespace attnkit::hopper {

struct SmemAddrs {
  uint32_t q, k, v;  // Q; stage s of K at k + s * kTileBytes, of V likewise
  Barriers bars;
};

// The boxes that carry tile tokens [n0, n0 + kBlockN) below kv_hi, and the rows they fill: at
// most kBlockN / 8 = 16 boxes (pages of 8 slots or more), one a lane.
template <typename C>
struct KvBoxes {
  int rows, count;
  __device__ __forceinline__ KvBoxes(const ExtendParams& p, const Tile& t, int n0) {
    rows = min(p.page_size, C::kBlockN);
    count = (min(C::kBlockN, t.kv_hi - n0) + rows - 1) / rows;
  }
  __device__ __forceinline__ uint32_t bytes() const { return static_cast<uint32_t>(count * rows * 128 * C::kColBlocks); }
};

// This lane's box of tile j: the cache slot it starts at (one page-table read, shared by K and V),
// or -1 where the tile has fewer boxes than lanes.
template <typename C>
__device__ __forceinline__ int box_slot(const ExtendParams& p, const Tile& t, int j, int lane) {
  const int n0 = t.kv_lo + j * C::kBlockN;
  const KvBoxes<C> boxes(p, t, n0);
  if (j >= t.num_kv_tiles || lane >= boxes.count) return -1;
  const int pos = n0 + lane * boxes.rows;
  return p.kv_page_indices[t.page_begin + pos / p.page_size] * p.page_size + pos % p.page_size;
}

// One K or V tile: lane 0 waits for the stage to be empty and announces the bytes, then each lane
// copies its box.
template <typename C>
__device__ __forceinline__ void load_kv_tile(const ExtendParams& p, const void* map, const Tile& t, int n0, int slot,
                                             uint32_t s_tile, uint32_t full, uint32_t empty, uint32_t parity,
                                             int lane) {
  namespace tma = ::attnkit::cuda::tma;
  const KvBoxes<C> boxes(p, t, n0);
  if (lane == 0) {
    tma::mbar_wait(empty, parity ^ 1);
    tma::mbar_expect_tx(full, boxes.bytes());
  }
  __syncwarp();
  if (slot >= 0) {
#pragma unroll
    for (int cb = 0; cb < C::kColBlocks; ++cb)
      tma::load_3d(s_tile + cb * C::kBlockN * 128 + lane * boxes.rows * 128, map, cb * 64, t.kv_head, slot, full);
  }
}

template <typename C>
__device__ __forceinline__ void produce(const ExtendMaps& maps, const ExtendParams& p, const SmemAddrs& sm) {
  namespace tma = ::attnkit::cuda::tma;
  static_assert(C::kBlockN / 8 <= 32, "one box a lane");
  const int lane = threadIdx.x % 32;
  int tiles_done = 0, kv_done = 0;
  for (int w = blockIdx.x; w < num_work(p); w += gridDim.x) {
    Tile t;
    if (!load_tile<C>(p, w, t)) continue;
    int slot = box_slot<C>(p, t, 0, lane);  // read before the waits, so its latency hides behind them
    if (lane == 0) {
      tma::mbar_wait(sm.bars.q_empty(), (tiles_done & 1) ^ 1);
      tma::mbar_expect_tx(sm.bars.q_full(), static_cast<uint32_t>(C::kColBlocks * p.tile_rows * 128));
      const int token = t.qo_start + t.row0 / t.group;
#pragma unroll
      for (int cb = 0; cb < C::kColBlocks; ++cb)
        tma::load_4d(sm.q + cb * C::kBlockM * 128, &maps.q, cb * 64, 0, t.kv_head, token, sm.bars.q_full());
    }
    ++tiles_done;
    for (int j = 0; j < t.num_kv_tiles; ++j, ++kv_done) {
      const int n0 = t.kv_lo + j * C::kBlockN;
      const RingSlot<C::kStages> ring(kv_done);
      load_kv_tile<C>(p, &maps.k, t, n0, slot, sm.k + ring.stage * C::kTileBytes, sm.bars.k_full(ring.stage),
                      sm.bars.k_empty(ring.stage), ring.parity, lane);
      load_kv_tile<C>(p, &maps.v, t, n0, slot, sm.v + ring.stage * C::kTileBytes, sm.bars.v_full(ring.stage),
                      sm.bars.v_empty(ring.stage), ring.parity, lane);
      slot = box_slot<C>(p, t, j + 1, lane);
    }
  }
}

}  // namespace attnkit::hopper
