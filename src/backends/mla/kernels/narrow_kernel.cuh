// The `mla` narrow kernels: work items of at most kN query rows (kN 16: 16 heads x one token;
// kN 32: the fp8_blocked cache's row tiles), computed transposed so that the 64-token KV tile is
// wgmma's M and the few query rows its N: S^T = K Q^T (m64nNk16, 36 k-steps) and
// O^T += V^T P^T (eight m64nNk16 over the 512 output values, 4 k-steps each). At 16 rows that is a
// quarter of the 64-row kernel's tensor work (which pads 16 rows to 64), so 16-head decode is
// limited by the cache read.
//   Warps 0-3 (one warpgroup) compute; the last warp loads KV tiles with TMA into a ring of
//   kStages stages.
//   bf16 cache: a stage is the 64 x 576 tile itself, 128-byte swizzled as wgmma reads it, released
//   by the four compute warps (an mbarrier of count 4).
//   fp8_blocked cache (kv_cache.h): a stage holds 64 raw 656-byte slots; the compute warps, and
//   at 16 rows seven more converting warps, dequantise it into one bf16 tile a batch of column
//   blocks at a time (fp8_tile.cuh); S^T's k-steps on each batch are issued as it is written, so
//   that conversion overlaps the first product; the stage is released after its last batch.
//   The softmax runs down M (the tile's tokens): a column's maximum is reduced across lanes and
//   the four warps through shared memory; row sums stay per thread until the epilogue.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "backends/mla/config.h"
#include "backends/mla/kernels/attend.h"
#include "backends/mla/kernels/fp8_tile.cuh"
#include "backends/mla/kernels/hopper.cuh"
#include "backends/mla/kernels/row_window.cuh"
#include "cuda/row_math.cuh"
#include "cuda/wgmma.cuh"

namespace attnkit::mla {

namespace narrow_detail {

constexpr int kColBlocks = kHeadDimQk / 64;            // 9 blocks of 64 values (128 bytes a row)
constexpr int kKBlockBytes = kTileTokens * 128;        // one column block of a 64-token tile
constexpr int kTileBytes = kColBlocks * kKBlockBytes;  // 73728: a bf16 tile
constexpr int kRawStageBytes = kTileTokens * kFp8SlotBytes;
constexpr int kOutStride = kHeadDimVo + 4;  // floats a staged output row: padded against bank conflicts
static_assert(kKBlockBytes == fp8_tile::kBlockBytes, "the dequantised tile has the bf16 tile's layout");

constexpr int align_1k(int n) { return (n + 1023) / 1024 * 1024; }

template <int kN, bool kFp8>
struct Layout {
  // Warps 0-3 compute (and convert), then kConvertWarps that only convert, then the TMA warp.
  // fp8 at 16 rows: seven converting warps beside the compute warpgroup (384 threads leave 168
  // registers a thread, which the 16-row kernel fits; the 32-row kernel's 249 do not), the tile
  // in batches of kBatchBlocks column blocks between barriers.
  static constexpr int kConvertWarps = kFp8 && kN == 16 ? 7 : 0;
  static constexpr int kBatchBlocks = kConvertWarps > 0 ? 3 : 1;
  static constexpr int kConverters = 128 + 32 * kConvertWarps;
  static constexpr int kProducerWarp = 4 + kConvertWarps;
  static constexpr int kThreads = 32 * (kProducerWarp + 1);
  static constexpr int kStages = kFp8 && kN == 16 ? 3 : 2;
  static constexpr int kQBlockBytes = kN * 128;
  static constexpr int kStageBytes = kFp8 ? kRawStageBytes : kTileBytes;
  static constexpr int kOffStages = align_1k(kColBlocks * kQBlockBytes);  // Q first
  static constexpr int kOffTile = align_1k(kOffStages + kStages * kStageBytes);  // fp8: the dequantised tile
  static constexpr int kOffP = kOffTile + (kFp8 ? kTileBytes : 0);              // P^T: kN rows x 64 tokens
  static constexpr int kOffRed = kOffP + kN * 128;                              // [4 warps][kN] f32
  static constexpr int kOffBar = kOffRed + 4 * kN * 4;                          // full[kStages], empty[kStages]
  static constexpr int kSmemBytes = kOffBar + 2 * kStages * 8;
  // The epilogue stages O [kN][kOutStride] f32 where the last tile was (every load has landed).
  static constexpr int kOffOut = kFp8 ? kOffTile : kOffStages;
  static_assert(kN * kOutStride * 4 <= kTileBytes, "the staged output must fit in a tile");
  static_assert(kRawStageBytes % 1024 == 0 && kOffP % 1024 == 0, "stages and P must start on 1024 bytes");
  static_assert(kSmemBytes <= 227 * 1024, "the kernel's shared memory exceeds the H100/H200 limit");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in 128-byte-swizzled column blocks of
// `block_bytes` (the rows of one 64-value column block, 8-row groups 1024 bytes apart).
__device__ __forceinline__ uint32_t swizzled(int block_bytes, int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * block_bytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ void compute_warps_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
// The compute and converting warps (fp8): a batch of the tile is written, or the tile is free.
template <int kConverters>
__device__ __forceinline__ void converters_sync() {
  asm volatile("bar.sync 2, %0;\n" ::"n"(kConverters) : "memory");
}

// Warp 4: every tile of the item into the ring, stage j % kStages once the compute warps have
// released it. Boxes past the item's KV end are not loaded; the barrier expects exactly the bytes that are.
template <int kN, bool kFp8>
__device__ __forceinline__ void produce(const void* map, const AttendParams& p, const WorkItem& w, uint32_t s_stages,
                                        uint32_t s_full, uint32_t s_empty, int lane) {
  using L = Layout<kN, kFp8>;
  const int box_rows = min(p.page_size, kTileTokens);
  const int32_t* pages = p.page_indices + w.page_begin;
  constexpr int kBoxesPerRows = kFp8 ? 1 : kColBlocks;
  constexpr int kBytesPerRow = kFp8 ? kFp8SlotBytes : kColBlocks * 128;
  for (int j = 0; j < w.num_tiles; ++j) {
    const int s = j % L::kStages;
    if (j >= L::kStages) hopper::mbar_wait(s_empty + 8 * s, ((j / L::kStages) - 1) & 1);
    const int n0 = w.n0 + j * kTileTokens;
    const int boxes = min(kTileTokens / box_rows, (w.kv_hi - n0 + box_rows - 1) / box_rows);
    const uint32_t stage = s_stages + s * L::kStageBytes;
    const uint32_t full = s_full + 8 * s;
    if (lane == 0) hopper::mbar_expect_tx(full, static_cast<uint32_t>(boxes * box_rows * kBytesPerRow));
    __syncwarp();
    for (int idx = lane; idx < boxes * kBoxesPerRows; idx += 32) {
      const int b = idx % boxes;
      const int cb = idx / boxes;
      const int pos = n0 + b * box_rows;
      const int slot = pages[pos / p.page_size] * p.page_size + pos % p.page_size;
      if constexpr (kFp8) {
        hopper::load_2d(stage + b * box_rows * kFp8SlotBytes, map, 0, slot, full);
      } else {
        hopper::load_2d(stage + cb * kKBlockBytes + b * box_rows * 128, map, cb * 64, slot, full);
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
  using L = Layout<kN, false>;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t desc_k = cuda::wgmma::make_desc(s_k + cb * kKBlockBytes + kk * 32, 16, 1024);
    const uint64_t desc_q = cuda::wgmma::make_desc(s_q + cb * L::kQBlockBytes + kk * 32, 16, 1024);
    wgmma_n<kN>(sc, desc_k, desc_q, !first || kk > 0);
  }
}

}  // namespace narrow_detail

// Accumulator register i of a thread (warp w, lane): M row (a token, or an output value) 16 w +
// lane / 4 + 8 ((i / 2) % 2), N column (a query row) 8 (i / 4) + 2 (lane % 4) + i % 2. The thread's
// kN / 4 columns are indexed c = 2 (i / 4) + i % 2.
template <int kN, bool kFp8>
__global__ void __launch_bounds__(narrow_detail::Layout<kN, kFp8>::kThreads, 1)
    narrow_kernel(const __grid_constant__ LatentMap map, const AttendParams p) {
  namespace nd = narrow_detail;
  namespace mma = cuda::wgmma;
  using L = nd::Layout<kN, kFp8>;
  constexpr int kCols = kN / 4;
  constexpr int kRegs = kN / 2;
  extern __shared__ __align__(1024) unsigned char smem[];
  if (static_cast<int>(blockIdx.x) >= p.counts[0]) return;  // past this plan's items
  const WorkItem w = p.work[blockIdx.x];
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const uint32_t s_q = hopper::smem_addr(smem);
  const uint32_t s_full = s_q + L::kOffBar;
  const uint32_t s_empty = s_full + 8 * L::kStages;
  float* s_red = reinterpret_cast<float*>(smem + L::kOffRed);
  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      hopper::mbar_init(s_full + 8 * s, 1);
      hopper::mbar_init(s_empty + 8 * s, kFp8 ? 1 : 4);  // fp8: thread 0 once every converter has read it
    }
  }
  __syncthreads();
  if (warp == L::kProducerWarp) {
    nd::produce<kN, kFp8>(&map, p, w, s_q + L::kOffStages, s_full, s_empty, lane);
    return;
  }
  if constexpr (L::kConvertWarps > 0) {
    if (warp >= 4) {  // a converting warp: its share of every tile's batches, in step with the compute warps
      for (int j = 0; j < w.num_tiles; ++j) {
        const int s = j % L::kStages;
        const int valid = min(kTileTokens, w.kv_hi - (w.n0 + j * kTileTokens));
        hopper::mbar_wait(s_full + 8 * s, (j / L::kStages) & 1);
        nd::converters_sync<L::kConverters>();
        for (int cb0 = 0; cb0 < nd::kColBlocks; cb0 += L::kBatchBlocks) {
          fp8_tile::dequantise_blocks<L::kConverters, L::kBatchBlocks>(smem + L::kOffStages + s * L::kStageBytes,
                                                                        smem + L::kOffTile, cb0, valid, tid);
          mma::fence_proxy_async();
          nd::converters_sync<L::kConverters>();
        }
      }
      return;
    }
  }

  // Q rows, zero past the item's end.
  const __nv_bfloat16* g_q = static_cast<const __nv_bfloat16*>(p.q);
  constexpr int kQChunks = kHeadDimQk / 8;
  for (int idx = tid; idx < kN * kQChunks; idx += 128) {
    const int r = idx / kQChunks;
    const int c = idx % kQChunks;
    const bool valid = r < w.rows;
    const __nv_bfloat16* src = valid ? g_q + (int64_t{w.q_row0} + r) * kHeadDimQk + c * 8 : g_q;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s_q + nd::swizzled(L::kQBlockBytes, r, c)),
                 "l"(src), "r"(valid ? 16 : 0));
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  mma::fence_proxy_async();
  nd::compute_warps_sync();

  const RowWindow win(p, w);
  const uint32_t s_p = s_q + L::kOffP;

  float o[8][kRegs];
#pragma unroll
  for (int mt = 0; mt < 8; ++mt)
#pragma unroll
    for (int i = 0; i < kRegs; ++i) o[mt][i] = 0.0f;
  float m[kCols], l[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    m[c] = -INFINITY;
    l[c] = 0.0f;
  }

  for (int j = 0; j < w.num_tiles; ++j) {
    const int s = j % L::kStages;
    const int n0 = w.n0 + j * kTileTokens;
    const int valid = min(kTileTokens, w.kv_hi - n0);
    hopper::mbar_wait(s_full + 8 * s, (j / L::kStages) & 1);
    float sc[kRegs];
    uint32_t s_k;
    if constexpr (kFp8) {
      // (Leaving tile j - 1's O^T in flight here, to overlap it with the conversion, makes ptxas
      // serialise every wgmma of the kernel.)
      const unsigned char* raw = smem + L::kOffStages + s * L::kStageBytes;
      s_k = s_q + L::kOffTile;
      nd::converters_sync<L::kConverters>();  // every compute warp's products of tile j - 1 are done: the tile is free
#pragma unroll
      for (int cb0 = 0; cb0 < nd::kColBlocks; cb0 += L::kBatchBlocks) {
        fp8_tile::dequantise_blocks<L::kConverters, L::kBatchBlocks>(raw, smem + L::kOffTile, cb0, valid, tid);
        mma::fence_proxy_async();
        nd::converters_sync<L::kConverters>();
        if (cb0 + L::kBatchBlocks == nd::kColBlocks && tid == 0) hopper::mbar_arrive(s_empty + 8 * s);  // read
        mma::fence();
#pragma unroll
        for (int cb = cb0; cb < cb0 + L::kBatchBlocks; ++cb) nd::s_block<kN>(sc, s_k, s_q, cb, cb == 0);  // while the next batch converts
      }
    } else {
      s_k = s_q + L::kOffStages + s * L::kStageBytes;
      if (valid < kTileTokens) {  // rows the boxes did not cover, or covered past the KV end: zero
        unsigned char* stage = smem + L::kOffStages + s * L::kStageBytes;
        for (int idx = tid; idx < (kTileTokens - valid) * kQChunks; idx += 128) {
          const int r = valid + idx / kQChunks;
          *reinterpret_cast<uint4*>(stage + nd::swizzled(nd::kKBlockBytes, r, idx % kQChunks)) = make_uint4(0, 0, 0, 0);
        }
        mma::fence_proxy_async();
        nd::compute_warps_sync();
      }
      mma::fence();
#pragma unroll
      for (int cb = 0; cb < nd::kColBlocks; ++cb) nd::s_block<kN>(sc, s_k, s_q, cb, cb == 0);
    }
    mma::commit();
    mma::wait_all();
    mma::fence_regs(sc);

    if (win.soft_cap) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) sc[i] = win.cap(sc[i]);
    }
    if (win.tile_masked(n0)) {
#pragma unroll
      for (int i = 0; i < kRegs; ++i) {
        const int2 vis = win.visible(8 * (i / 4) + 2 * (lane % 4) + i % 2);
        const int t = n0 + 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
        if (t < vis.x || t >= vis.y) sc[i] = -INFINITY;
      }
    }
    // Column maxima: the thread's two tokens, the 8 lanes of its column, the four warps.
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int i0 = 4 * (c / 2) + c % 2;
      float mx = fmaxf(sc[i0], sc[i0 + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      if (lane < 4) s_red[warp * kN + 8 * (c / 2) + 2 * lane + c % 2] = mx;
    }
    nd::compute_warps_sync();
    float corr[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = 8 * (c / 2) + 2 * (lane % 4) + c % 2;
      const float mx = fmaxf(fmaxf(s_red[col], s_red[kN + col]), fmaxf(s_red[2 * kN + col], s_red[3 * kN + col]));
      const float m_new = fmaxf(m[c], mx * win.exp_scale);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: P = 0, not NaN
      corr[c] = cuda::fast_exp2(m[c] - base);
      m[c] = m_new;
      const int i0 = 4 * (c / 2) + c % 2;
      sc[i0] = cuda::fast_exp2(fmaf(sc[i0], win.exp_scale, -base));
      sc[i0 + 2] = cuda::fast_exp2(fmaf(sc[i0 + 2], win.exp_scale, -base));
      l[c] = l[c] * corr[c] + sc[i0] + sc[i0 + 2];
    }
#pragma unroll
    for (int mt = 0; mt < 8; ++mt)
#pragma unroll
      for (int i = 0; i < kRegs; ++i) o[mt][i] *= corr[2 * (i / 4) + i % 2];
    // P^T [kN query rows][64 tokens], bf16, 128-byte swizzled.
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
      const int t = 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
      *reinterpret_cast<__nv_bfloat16*>(smem + L::kOffP + nd::swizzled(L::kQBlockBytes, col, t / 8) + 2 * (t % 8)) = __float2bfloat16_rn(sc[i]);
    }
    mma::fence_proxy_async();
    nd::compute_warps_sync();

    // O^T += V^T P^T: value block mt is the tile's column block mt, read MN-major.
    mma::fence();
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
#pragma unroll
      for (int kk = 0; kk < kTileTokens / 16; ++kk) {
        const uint64_t desc_v = mma::make_desc(s_k + mt * nd::kKBlockBytes + kk * 16 * 128, nd::kKBlockBytes, 1024);
        const uint64_t desc_p = mma::make_desc(s_p + kk * 32, 16, 1024);
        nd::wgmma_n_ta<kN>(o[mt], desc_v, desc_p);
      }
    }
    mma::commit();
    mma::wait_all();
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) mma::fence_regs(o[mt]);
    if constexpr (!kFp8) {
      __syncwarp();
      if (lane == 0) hopper::mbar_arrive(s_empty + 8 * s);
    }
  }

  // Epilogue: column sums across lanes and warps, O staged row-major, then written coalesced.
  nd::compute_warps_sync();  // every warp is done with the last tile and with s_red
  float sum[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    float x = l[c];
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    x += __shfl_xor_sync(0xffffffffu, x, 8);
    x += __shfl_xor_sync(0xffffffffu, x, 16);
    if (lane < 4) s_red[warp * kN + 8 * (c / 2) + 2 * lane + c % 2] = x;
  }
  nd::compute_warps_sync();
  float* s_out = reinterpret_cast<float*>(smem + L::kOffOut);
  float inv[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int col = 8 * (c / 2) + 2 * (lane % 4) + c % 2;
    sum[c] = s_red[col] + s_red[kN + col] + s_red[2 * kN + col] + s_red[3 * kN + col];
    inv[c] = sum[c] > 0.0f ? 1.0f / sum[c] : 0.0f;  // a row that sees nothing: zeros
  }
#pragma unroll
  for (int mt = 0; mt < 8; ++mt)
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int col = 8 * (i / 4) + 2 * (lane % 4) + i % 2;
      const int d = 64 * mt + 16 * warp + lane / 4 + 8 * ((i / 2) % 2);
      s_out[col * nd::kOutStride + d] = o[mt][i] * inv[2 * (i / 4) + i % 2];
    }
  nd::compute_warps_sync();
  const bool split = w.partial >= 0;
  for (int idx = tid; idx < w.rows * (kHeadDimVo / 4); idx += 128) {
    const int r = idx / (kHeadDimVo / 4);
    const int c4 = idx % (kHeadDimVo / 4);
    const float4 v = *reinterpret_cast<const float4*>(s_out + r * nd::kOutStride + 4 * c4);
    if (split) {
      *reinterpret_cast<float4*>(p.partial_o + (int64_t{w.partial} * kTileRows + r) * kHeadDimVo + 4 * c4) = v;
    } else {
      __nv_bfloat162* g_o = reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) +
                                                              (int64_t{w.q_row0} + r) * kHeadDimVo + 4 * c4);
      g_o[0] = __floats2bfloat162_rn(v.x, v.y);
      g_o[1] = __floats2bfloat162_rn(v.z, v.w);
    }
  }
  if (split && warp == 0 && lane < 4) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = 8 * (c / 2) + 2 * lane + c % 2;
      if (col < w.rows) {
        p.partial_lse[int64_t{w.partial} * kTileRows + col] =
            sum[c] > 0.0f ? (m[c] + log2f(sum[c])) * RowWindow::kLn2 : -INFINITY;
      }
    }
  }
}

}  // namespace attnkit::mla
