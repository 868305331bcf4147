// The `mla` narrow kernels: work items of at most kN query rows (kN 16: 16 heads x one token;
// kN 32: the fp8_blocked cache's row tiles), computed transposed so that the 64-token KV tile is
// wgmma's M and the few query rows its N: S^T = K Q^T (m64nNk16, 36 k-steps) and
// O^T += V^T P^T (eight m64nNk16 over the 512 output values, 4 k-steps each). At 16 rows that is a
// quarter of the 64-row kernel's tensor work (which pads 16 rows to 64), so 16-head decode is
// limited by the cache read.
//   Warps 0-3 (one warpgroup) compute on bf16 tiles, which the TMA warp fills (bf16 cache) or
//   which warps 4-11 convert from the raw slots the TMA warp brings (fp8_blocked cache,
//   fp8_tile.cuh), a tile ahead of the products; the shared-memory layouts are narrow_layout.cuh.
//   The softmax runs down M (the tile's tokens): a column's maximum is reduced across lanes and
//   the four warps through shared memory; row sums stay per thread until the epilogue.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "backends/mla/config.h"
#include "backends/mla/kernels/attend.h"
#include "backends/mla/kernels/fp8_tile.cuh"
#include "backends/mla/kernels/hopper.cuh"
#include "backends/mla/kernels/narrow_layout.cuh"
#include "backends/mla/kernels/row_window.cuh"
#include "cuda/row_math.cuh"
#include "cuda/setmaxnreg.cuh"
#include "cuda/wgmma.cuh"

namespace attnkit::mla {


// The converter warps (fp8_blocked cache): tile j's raw pieces into bf16 tile j % 2, once the
// compute warps have released it, each column block counted on its barrier by each warp, each raw
// stage released once the warps have read it. Rows past the item's KV end are written as zeros.
template <int kN>
__device__ __forceinline__ void convert_tiles(unsigned char* smem, const narrow_detail::Barriers<kN, true>& bar,
                                              const WorkItem& w, int ctid) {
  namespace nd = narrow_detail;
  using L = nd::Layout<kN, true>;
  const int lane = ctid % 32;
  for (int j = 0; j < w.num_tiles; ++j) {
    const int t = j % L::kTiles;
    if (j >= L::kTiles) hopper::mbar_wait(bar.tile_empty(t), ((j / L::kTiles) - 1) & 1);
    const int valid = min(kTileTokens, w.kv_hi - (w.n0 + j * kTileTokens));
    for (int q = 0; q < L::kPiecesPerTile; ++q) {
      const int i = j * L::kPiecesPerTile + q;
      const int r = i % L::kRawStages;
      hopper::mbar_wait(bar.raw_full(r), (i / L::kRawStages) & 1);
      // The eight e4m3 blocks as one run of chunks (eight a thread at 32 rows and 256 converters,
      // four in flight), then the RoPE block; one proxy fence for the piece.
      unsigned char* tile = smem + L::kOffTiles + t * nd::kTileBytes;
      const unsigned char* raw = smem + L::kOffRaw + r * L::kRawBytes;
      fp8_tile::dequantise<L::kConverters, L::kRawTokens, 4, nd::kColBlocks - 1>(raw, tile, q * L::kRawTokens, 0,
                                                                                 valid - q * L::kRawTokens, ctid);
      fp8_tile::dequantise<L::kConverters, L::kRawTokens>(raw, tile, q * L::kRawTokens, nd::kColBlocks - 1,
                                                          valid - q * L::kRawTokens, ctid);
      cuda::wgmma::fence_proxy_async();  // the writes, before wgmma reads them
      __syncwarp();
      if (lane < nd::kColBlocks) hopper::mbar_arrive(bar.tile_full(t, lane));
      if (lane == 0) hopper::mbar_arrive(bar.raw_empty(r));  // every load of the piece was used above
    }
  }
}

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
  const nd::Barriers<kN, kFp8> bar{s_q + L::kOffBar};
  float* s_red = reinterpret_cast<float*>(smem + L::kOffRed);
  if (tid == 0) {
    for (int t = 0; t < L::kTiles; ++t) {
      for (int cb = 0; cb < nd::kColBlocks; ++cb) hopper::mbar_init(bar.tile_full(t, cb), L::kBlockArrivals);
      hopper::mbar_init(bar.tile_empty(t), 4);  // the compute warps
    }
    for (int r = 0; r < L::kRawStages; ++r) {
      hopper::mbar_init(bar.raw_full(r), 1);                    // the TMA
      hopper::mbar_init(bar.raw_empty(r), L::kConverterWarps);  // each converter warp, once it has read it
    }
  }
  __syncthreads();
  if (warp >= L::kProducerWarp) {
    if constexpr (kFp8) cuda::lower_registers<L::kProducerRegs>();  // its whole warpgroup
    if (warp > L::kProducerWarp) return;
    if constexpr (kFp8) {
      nd::produce<L::kRawStages, L::kRawTokens, true>(&map, p, w, s_q + L::kOffRaw, L::kRawBytes, bar.raw_full(0),
                                                      bar.raw_empty(0), lane);
    } else {
      nd::produce<L::kTiles, kTileTokens, false>(&map, p, w, s_q + L::kOffTiles, nd::kTileBytes, bar.tile_full(0, 0),
                                                 bar.tile_empty(0), lane);
    }
    return;
  }
  if constexpr (kFp8) {
    if (warp >= 4) {
      cuda::lower_registers<L::kConverterRegs>();
      convert_tiles<kN>(smem, bar, w, tid - 128);
      return;
    }
    cuda::raise_registers<L::kComputeRegs>();
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
    const int n0 = w.n0 + j * kTileTokens;
    const int valid = min(kTileTokens, w.kv_hi - n0);
    const int t = j % L::kTiles;
    const uint32_t s_k = s_q + L::kOffTiles + t * nd::kTileBytes;
    float sc[kRegs];
    const uint32_t parity = (j / L::kTiles) & 1;
    if (!kFp8 && valid < kTileTokens) {  // rows the boxes did not cover, or covered past the KV end: zero
      for (int cb = 0; cb < nd::kColBlocks; ++cb) hopper::mbar_wait(bar.tile_full(t, cb), parity);
      for (int idx = tid; idx < (kTileTokens - valid) * kQChunks; idx += 128) {
        const int row = valid + idx / kQChunks;
        *reinterpret_cast<uint4*>(smem + L::kOffTiles + t * nd::kTileBytes +
                                  nd::swizzled(nd::kKBlockBytes, row, idx % kQChunks)) = make_uint4(0, 0, 0, 0);
      }
      mma::fence_proxy_async();
      nd::compute_warps_sync();
    }
    // Each column block's k-steps as soon as it has been filled. The waits are PTX loops, each
    // followed by a wgmma fence: so ptxas keeps the products of the group in flight across them.
#pragma unroll
    for (int cb = 0; cb < nd::kColBlocks; ++cb) {
      ::attnkit::cuda::tma::mbar_wait_in_ptx(bar.tile_full(t, cb), parity);
      mma::fence();
      nd::s_block<kN>(sc, s_k, s_q, cb, cb == 0);
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
    bool moved = false;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = 8 * (c / 2) + 2 * (lane % 4) + c % 2;
      const float mx = fmaxf(fmaxf(s_red[col], s_red[kN + col]), fmaxf(s_red[2 * kN + col], s_red[3 * kN + col]));
      const bool move = mx * win.exp_scale > m[c] + RowWindow::kMaxSlack;  // m = -inf: any visible score
      moved |= move;
      const float m_new = move ? mx * win.exp_scale : m[c];
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: P = 0, not NaN
      corr[c] = move ? cuda::fast_exp2(m[c] - base) : 1.0f;
      m[c] = m_new;
      const int i0 = 4 * (c / 2) + c % 2;
      sc[i0] = cuda::fast_exp2(fmaf(sc[i0], win.exp_scale, -base));
      sc[i0 + 2] = cuda::fast_exp2(fmaf(sc[i0 + 2], win.exp_scale, -base));
      l[c] = l[c] * corr[c] + sc[i0] + sc[i0 + 2];
    }
    if (__any_sync(0xffffffffu, moved)) {  // most tiles move no column's max (RowWindow::kMaxSlack)
#pragma unroll
      for (int mt = 0; mt < 8; ++mt)
#pragma unroll
        for (int i = 0; i < kRegs; ++i) o[mt][i] *= corr[2 * (i / 4) + i % 2];
    }
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
    const uint64_t v0 = mma::make_desc(s_k, nd::kKBlockBytes, 1024), p0 = mma::make_desc(s_p, 16, 1024);
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) {
#pragma unroll
      for (int kk = 0; kk < kTileTokens / 16; ++kk) {
        nd::wgmma_n_ta<kN>(o[mt], mma::advance_desc(v0, mt * nd::kKBlockBytes + kk * 16 * 128),
                           mma::advance_desc(p0, kk * 32));
      }
    }
    mma::commit();
    mma::wait_all();
#pragma unroll
    for (int mt = 0; mt < 8; ++mt) mma::fence_regs(o[mt]);
    __syncwarp();
    if (lane == 0) hopper::mbar_arrive(bar.tile_empty(t));
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
  if ((split || p.lse != nullptr) && warp == 0 && lane < 4) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int col = 8 * (c / 2) + 2 * lane + c % 2;
      if (col < w.rows) {
        const float lse = sum[c] > 0.0f ? (m[c] + log2f(sum[c])) * RowWindow::kLn2 : -INFINITY;
        if (split) {
          p.partial_lse[int64_t{w.partial} * kTileRows + col] = lse;
        } else {
          p.lse[int64_t{w.q_row0} + col] = lse;
        }
      }
    }
  }
}

}  // namespace attnkit::mla
