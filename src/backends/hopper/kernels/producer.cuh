// The `hopper` extend kernel's producer: the first warpgroup. Per tile: Q once with the TMA (one
// box a column block: tokens x group rows), then each K and V tile into the next ring stage as soon
// as the consumers have released it, K one tile ahead of V. Pages of 8 slots or more: the TMA
// warps (config.cuh's kTmaWarps) issue TMA boxes of min(page_size, kMaxBoxRows) tokens, a copy a
// thread, the page table read two tiles ahead, completion counted in bytes on the stage's full
// barrier. Smaller pages (or when asked): all 128 threads
// gather rows with cp.async, each arriving on the full barrier when its copies land. An e4m3 cache:
// all 128 threads load rows, dequantise them to T and store them, each arriving once it has
// stored. kernel.cuh sets the roles up.
#pragma once

#include <type_traits>

#include "backends/hopper/kernels/config.cuh"
#include "backends/hopper/kernels/scheduler.cuh"
#include "backends/planned/kernels/prefill_tile.cuh"
#include "cuda/e4m3_to_bf16.h"
#include "cuda/tma.cuh"

namespace attnkit::hopper {

struct SmemAddrs {
  uint32_t q, k, v;  // Q; stage s of K at k + s * kTileBytes, of V likewise
  uint32_t vt, q8, q_scale;  // fp8 products only: V^T's stages, Q in e4m3, its rows' descales
  Barriers bars;
};

// The boxes that carry tile tokens [n0, n0 + kBlockN) below kv_hi, and the rows they fill: at
// most kBlockN / 8 = 24 boxes (pages of 8 slots or more), each a copy a column block.
template <typename C>
struct KvBoxes {
  int rows, count;
  __device__ __forceinline__ KvBoxes(const ExtendParams& p, const Tile& t, int n0) {
    rows = min(p.page_size, kMaxBoxRows);
    count = (min(C::kBlockN, t.kv_hi - n0) + rows - 1) / rows;
  }
  // The copies (box, column block) of the tile are numbered box x kKvColBlocks + column block;
  // copy c goes to lane c / kTmaWarps of TMA warp c % kTmaWarps. What warp w's copies carry:
  __device__ __forceinline__ uint32_t warp_bytes(int w) const {
    const int copies = count * C::kKvColBlocks;
    const int mine = copies > w ? (copies - w + C::kTmaWarps - 1) / C::kTmaWarps : 0;
    return static_cast<uint32_t>(mine * rows * 128);
  }
};

// The copy producer thread `tid` issues (KvBoxes' numbering), and its box and column block.
template <typename C>
struct KvCopy {
  int box, cb;
  __device__ __forceinline__ explicit KvCopy(int tid) {
    const int copy = (tid % 32) * C::kTmaWarps + tid / 32;
    box = copy / C::kKvColBlocks;
    cb = copy % C::kKvColBlocks;
  }
};

// This thread's box of tile j: the cache slot it starts at (one page-table read, shared by K and
// V), or -1 where the tile has fewer copies than this thread's number.
template <typename C>
__device__ __forceinline__ int box_slot(const ExtendParams& p, const Tile& t, int j, int tid) {
  const int n0 = t.kv_lo + j * C::kBlockN;
  const KvBoxes<C> boxes(p, t, n0);
  const KvCopy<C> copy(tid);
  if (j >= t.num_kv_tiles || copy.box >= boxes.count) return -1;
  const int pos = n0 + copy.box * boxes.rows;
  return p.kv_page_indices[t.page_begin + pos / p.page_size] * p.page_size + pos % p.page_size;
}

// One K or V tile: lane 0 of each TMA warp waits for the stage to be empty and announces its
// warp's bytes, then each thread with a copy issues it.
template <typename C>
__device__ __forceinline__ void load_kv_tile(const ExtendParams& p, const void* map, const Tile& t, int n0, int slot,
                                             uint32_t s_tile, uint32_t full, uint32_t empty, uint32_t parity,
                                             int tid) {
  namespace tma = ::attnkit::cuda::tma;
  const KvBoxes<C> boxes(p, t, n0);
  if (tid % 32 == 0) {
    tma::mbar_wait(empty, parity ^ 1);
    tma::mbar_expect_tx(full, boxes.warp_bytes(tid / 32));
  }
  __syncwarp();
  if (slot >= 0) {
    const KvCopy<C> copy(tid);
    tma::load_3d(s_tile + copy.cb * C::kBlockN * 128 + copy.box * boxes.rows * 128, map, copy.cb * 64, t.kv_head,
                 slot, full);
  }
}

// Pages of 1, 2 or 4 slots, where a TMA box a page would be too small to pay: the producer
// warpgroup copies the rows with cp.async, each 16-byte piece straight to its swizzled place (the
// layout the TMA writes). Thread `tid` reads the page table for row tid % kBlockN (row_offset: one
// read shared by K and V, -1 at or past kv_hi: such rows are zero-filled, cp.async with no source
// bytes, so the consumers zero no V tail). The copies are coalesced: warp w holds the offsets of
// rows 32 (w % kWarpsPerTile) .. + 32 and copies them, 8 lanes a row (128 bytes a column block),
// 4 rows an instruction, each lane taking its row's offset from the lane that read it.
template <typename C>
__device__ __forceinline__ int64_t gather_row_offset(const ExtendParams& p, const Tile& t, int j, int tid) {
  const int pos = t.kv_lo + j * C::kBlockN + tid % C::kBlockN;
  if (j >= t.num_kv_tiles || pos >= t.kv_hi) return -1;
  const int64_t slot = int64_t{p.kv_page_indices[t.page_begin + pos / p.page_size]} * p.page_size + pos % p.page_size;
  return (slot * p.num_kv_heads + t.kv_head) * C::kHeadDim;
}

// The rows and column blocks warp `tid / 32` copies: rows first_row .. + 32 of the tile, column
// blocks cb0, cb0 + cb_step, ... (kBlockN 128: each warp its rows, every column block; kBlockN 64:
// warps w and w + 2 share rows and take alternate column blocks).
template <typename C>
struct GatherShare {
  static constexpr int kWarpsPerTile = C::kBlockN / 32;  // warps whose offsets cover a tile's rows
  static constexpr int kCbStep = 4 / kWarpsPerTile;
  static_assert(C::kBlockN % 32 == 0 && 4 % kWarpsPerTile == 0 && C::kColBlocks % kCbStep == 0, "4 warps share a tile");
  int first_row, cb0;
  __device__ __forceinline__ explicit GatherShare(int tid)
      : first_row(32 * ((tid / 32) % kWarpsPerTile)), cb0((tid / 32) / kWarpsPerTile) {}
};

template <typename C>
__device__ __forceinline__ void gather_kv_tile(const void* pool, int64_t row_offset, uint32_t s_tile, uint32_t full,
                                               uint32_t empty, uint32_t parity, int tid) {
  namespace tile = ::attnkit::planned::tile;
  using T = typename C::T;
  const GatherShare<C> share(tid);
  const int lane = tid % 32;
  const int piece = lane % 8;  // this lane's 16-byte piece of a row's 128 bytes
  ::attnkit::cuda::tma::mbar_wait(empty, parity ^ 1);
  // Rows outside, column blocks inside (a column block is 1024-byte aligned: the swizzle's bits
  // stay the row's), two rows at a time: the producer's registers hold two rows' addresses.
#pragma unroll 2
  for (int i = 0; i < 8; ++i) {
    const int r = 4 * i + lane / 8;  // of the warp's 32 rows
    const int64_t offset = __shfl_sync(0xffffffffu, row_offset, r);
    const int row = share.first_row + r;
    // Piece k of a row lies at (k ^ row % 8) * 16 in its 128 bytes (the 128-byte swizzle).
    const uint32_t dst = s_tile + static_cast<uint32_t>(row * 128 + ((piece ^ (row & 7)) << 4));
    const T* src = static_cast<const T*>(pool) + (offset >= 0 ? offset : 0) + piece * 8;
#pragma unroll
    for (int cb = share.cb0; cb < C::kColBlocks; cb += GatherShare<C>::kCbStep)
      tile::cp_async_16(dst + static_cast<uint32_t>(cb * C::kBlockN * 128), src + cb * 64, offset >= 0);
  }
  tile::cp_async_arrive(full);
}

// e4m3 -> T by moving bits, then one multiply a pair by the cache's scale times the power of two
// the move leaves out (cuda/e4m3_to_bf16.h): each value lands within two roundings of stored x
// scale. NaN: the pair's bits do not carry it, so a 16-byte piece holding one is multiplied by NaN.
template <typename T>
struct E4m3Dequant {
  static constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  using T2 = std::conditional_t<kBf16, __nv_bfloat162, __half2>;
  static constexpr uint32_t kNan = kBf16 ? 0x7fc07fc0u : 0x7e007e00u;
  __device__ __forceinline__ static uint32_t factor(float scale) {
    namespace cv = ::attnkit::cuda::e4m3_to_bf16;
    T2 f;
    if constexpr (kBf16) {
      f = __float2bfloat162_rn(scale * cv::kTwoPow120);
    } else {
      f = __float2half2_rn(scale * cv::kTwoPow8);
    }
    return *reinterpret_cast<const uint32_t*>(&f);
  }
  __device__ __forceinline__ static void quad(uint32_t four, uint32_t& lo, uint32_t& hi) {
    if constexpr (kBf16) {
      ::attnkit::cuda::e4m3_to_bf16::scaled_down_quad(four, lo, hi);
    } else {
      ::attnkit::cuda::e4m3_to_bf16::scaled_down_quad_f16(four, lo, hi);
    }
  }
  __device__ __forceinline__ static uint32_t mul(uint32_t a, uint32_t b) {
    const T2 p = __hmul2(*reinterpret_cast<const T2*>(&a), *reinterpret_cast<const T2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&p);
  }
};

// 16 e4m3 values -> 16 T, as two 16-byte pieces.
template <typename T>
__device__ __forceinline__ void dequantise_piece(const uint4& raw, uint32_t factor, uint4& first, uint4& second) {
  namespace cv = ::attnkit::cuda::e4m3_to_bf16;
  using D = E4m3Dequant<T>;
  const uint32_t f = cv::has_nan(raw.x) | cv::has_nan(raw.y) | cv::has_nan(raw.z) | cv::has_nan(raw.w) ? D::kNan : factor;
  D::quad(raw.x, first.x, first.y);
  D::quad(raw.y, first.z, first.w);
  D::quad(raw.z, second.x, second.y);
  D::quad(raw.w, second.z, second.w);
  first = make_uint4(D::mul(first.x, f), D::mul(first.y, f), D::mul(first.z, f), D::mul(first.w, f));
  second = make_uint4(D::mul(second.x, f), D::mul(second.y, f), D::mul(second.z, f), D::mul(second.w, f));
}

__device__ __forceinline__ void st_shared_16(uint32_t addr, const uint4& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// An e4m3 cache's tile: the same rows and column blocks a warp as gather_kv_tile, 4 lanes a row
// (a column block's 64 bytes), 8 rows an instruction: each lane loads its 16 e4m3 values,
// dequantises them with `factor` (the cache's k or v scale, E4m3Dequant::factor) and stores the two
// 16-byte pieces they make, swizzled; rows past kv_hi are zeros. Four 16-byte loads are in flight
// a thread before any is converted. The stores are generic-proxy writes that wgmma reads through
// the async proxy: fenced before the arrival.
template <typename C>
__device__ __forceinline__ void gather_e4m3_kv_tile(const void* pool, int64_t row_offset, uint32_t factor,
                                                    uint32_t s_tile, uint32_t full, uint32_t empty, uint32_t parity,
                                                    int tid) {
  constexpr int kStep = GatherShare<C>::kCbStep;
  constexpr int kCbs = C::kColBlocks / kStep;  // column blocks a warp loads: 1 (d64) or 2
  constexpr int kRows = 4 / kCbs;              // rows a lane has in flight
  const GatherShare<C> share(tid);
  const int lane = tid % 32;
  const int quarter = lane % 4;  // this lane's 16 bytes of a row's 64 (pieces 2 quarter, 2 quarter + 1 out)
  ::attnkit::cuda::tma::mbar_wait(empty, parity ^ 1);
#pragma unroll 1
  for (int i0 = 0; i0 < 4; i0 += kRows) {
    uint4 raw[kRows][kCbs];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int64_t offset = __shfl_sync(0xffffffffu, row_offset, 8 * (i0 + i) + lane / 4);
      const uint4* src = reinterpret_cast<const uint4*>(static_cast<const unsigned char*>(pool) + (offset >= 0 ? offset : 0));
#pragma unroll
      for (int c = 0; c < kCbs; ++c)
        raw[i][c] = offset >= 0 ? __ldg(src + (share.cb0 + c * kStep) * 4 + quarter) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = share.first_row + 8 * (i0 + i) + lane / 4;
#pragma unroll
      for (int c = 0; c < kCbs; ++c) {
        const uint32_t row_base = s_tile + static_cast<uint32_t>(((share.cb0 + c * kStep) * C::kBlockN + row) * 128);
        uint4 first, second;
        dequantise_piece<typename C::T>(raw[i][c], factor, first, second);
        st_shared_16(row_base + static_cast<uint32_t>(((2 * quarter) ^ (row & 7)) << 4), first);
        st_shared_16(row_base + static_cast<uint32_t>(((2 * quarter + 1) ^ (row & 7)) << 4), second);
      }
    }
  }
  ::attnkit::cuda::wgmma::fence_proxy_async();
  ::attnkit::cuda::tma::mbar_arrive(full);
}

// Where tile j's rows come from, for this producer thread: its TMA box's cache slot (one a lane,
// box_slot), or with kGather its row's element offset (gather_row_offset); past the tile list, a
// value no load uses.
template <typename C>
__device__ __forceinline__ int64_t kv_source(const ExtendParams& p, const Tile& t, int j, int tid) {
  if constexpr (C::kGather) {
    return gather_row_offset<C>(p, t, j, tid);
  } else {
    return box_slot<C>(p, t, j, tid);
  }
}

// Tile j's K (or V, with is_v) into ring slot `ring`, from `src` (kv_source's value for tile j).
template <typename C>
__device__ __forceinline__ void load_kv(const ExtendMaps& maps, const ExtendParams& p, const SmemAddrs& sm,
                                        const Tile& t, int j, bool is_v, int64_t src, const RingSlot<C::kStages>& ring,
                                        uint32_t factor, int tid) {
  const uint32_t s_tile = (is_v ? sm.v : sm.k) + ring.stage * C::kTileBytes;
  const uint32_t full = is_v ? sm.bars.v_full(ring.stage) : sm.bars.k_full(ring.stage);
  const uint32_t empty = is_v ? sm.bars.v_empty(ring.stage) : sm.bars.k_empty(ring.stage);
  const void* pool = is_v ? p.v_pool : p.k_pool;
  if constexpr (C::kE4m3Kv) {
    gather_e4m3_kv_tile<C>(pool, src, factor, s_tile, full, empty, ring.parity, tid);
  } else if constexpr (C::kGather) {
    gather_kv_tile<C>(pool, src, s_tile, full, empty, ring.parity, tid);
  } else {
    load_kv_tile<C>(p, is_v ? &maps.v : &maps.k, t, t.kv_lo + j * C::kBlockN, static_cast<int>(src), s_tile, full,
                    empty, ring.parity, tid);
  }
}

// The producer warpgroup's thread `tid` (with TMA boxes, one of the kTmaWarps warps' threads). Per work tile: Q, then K_0, then K_{j+1} before V_j: the order the consumers
// take them in (S_{j+1} is issued before P_j V_j). V_j's stage frees only when P_{j-3} V_{j-3}
// is done, so a K queued behind it would wait for that too: on an H100, K first took the d128
// kernel from 457 to 583 TFLOP/s (1 x 8192 full, page 64). Each tile's page-table reads are made
// two tiles ahead, while the copies before them wait for their stages.
template <typename C>
__device__ __forceinline__ void produce(const ExtendMaps& maps, const ExtendParams& p, const SmemAddrs& sm, int tid) {
  namespace tma = ::attnkit::cuda::tma;
  static_assert(C::kBlockN / 8 * C::kKvColBlocks <= 32 * C::kTmaWarps, "a copy a thread");
  int tiles_done = 0, kv_done = 0;
  uint32_t factor_k = 0, factor_v = 0;
  if constexpr (C::kE4m3Kv) {
    factor_k = E4m3Dequant<typename C::T>::factor(p.k_scale);
    factor_v = E4m3Dequant<typename C::T>::factor(p.v_scale);
  }
  for (int k = 0, w = cta_work(0); w < num_work(p); w = cta_work(++k)) {
    Tile t;
    if (!load_tile<C>(p, w, t)) continue;
    // Read before the waits, so that their latency hides behind them.
    int64_t src_v = kv_source<C>(p, t, 0, tid);  // tile j's, for V_j (and K_0)
    int64_t src_k = kv_source<C>(p, t, 1, tid);  // tile j + 1's, for K_{j+1}
    if (tid == 0) {
      tma::mbar_wait(sm.bars.q_empty(), (tiles_done & 1) ^ 1);
      tma::mbar_expect_tx(sm.bars.q_full(), static_cast<uint32_t>(C::kColBlocks * p.tile_rows * 128));
      const int token = t.qo_start + t.row0 / t.group;
#pragma unroll
      for (int cb = 0; cb < C::kColBlocks; ++cb)
        tma::load_4d(sm.q + cb * C::kBlockM * 128, &maps.q, cb * 64, 0, t.kv_head, token, sm.bars.q_full());
    }
    ++tiles_done;
    if (t.num_kv_tiles > 0) load_kv<C>(maps, p, sm, t, 0, false, src_v, RingSlot<C::kStages>(kv_done), factor_k, tid);
    for (int j = 0; j < t.num_kv_tiles; ++j, ++kv_done) {
      if (j + 1 < t.num_kv_tiles)
        load_kv<C>(maps, p, sm, t, j + 1, false, src_k, RingSlot<C::kStages>(kv_done + 1), factor_k, tid);
      load_kv<C>(maps, p, sm, t, j, true, src_v, RingSlot<C::kStages>(kv_done), factor_v, tid);
      src_v = src_k;
      src_k = kv_source<C>(p, t, j + 2, tid);
    }
  }
  // A gathering thread leaves only once its last copies have landed (their barrier arrivals are
  // then made), not with cp.async still in flight.
  if constexpr (C::kGather) ::attnkit::planned::tile::cp_async_wait<0>();
}

}  // namespace attnkit::hopper
