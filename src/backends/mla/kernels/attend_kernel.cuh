// The `mla` attention kernel. One CTA, two warpgroups, one work item (plan.h): 64 query rows of one
// request (heads x new tokens; rows past the item's end are zero) against the item's KV tiles.
//   Q: 64 x 576 bf16, loaded once with cp.async into the 128-byte-swizzled layout wgmma reads.
//   K tiles: 64 tokens x 576, two stages; warp 0 issues one TMA box per (page piece, 64-column
//     block), each column block counted on its own mbarrier, so S starts on the first block while
//     the others land. The same tile is V: its first 512 columns.
//   Per tile: each warpgroup computes S for 32 of the 64 tokens (m64n32, 36 k-steps), the two
//     exchange their row maxima through shared memory, write P (bf16) for their tokens into one
//     shared 64 x 64 tile, and each accumulates its half of O (64 x 256 f32, m64n256, 4 k-steps)
//     from the whole P and its 256 V columns. Row sums stay per warpgroup until the epilogue.
// Tile j + 1's loads are issued at the top of iteration j, once a CTA barrier shows both
// warpgroups done with tile j - 1 (whose stage they take), so they overlap all of tile j's math.
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "backends/mla/config.h"
#include "backends/mla/kernels/attend.h"
#include "backends/mla/kernels/hopper.cuh"
#include "backends/mla/kernels/row_window.cuh"
#include "cuda/row_math.cuh"
#include "cuda/wgmma.cuh"

namespace attnkit::mla {

namespace attend_detail {

constexpr int kThreads = 256;
constexpr int kBlockBytes = kTileRows * 128;                 // one 64-column block of 64 rows
constexpr int kColBlocks = kHeadDimQk / 64;                  // 9
constexpr int kTileBytes = kColBlocks * kBlockBytes;         // 73728: Q, or one K stage
constexpr int kOffK = kTileBytes;                            // two stages after Q
constexpr int kOffP = 3 * kTileBytes;                        // P: 64 x 64 bf16, one block
constexpr int kOffMax = kOffP + kBlockBytes;                 // [2 parities][2 warpgroups][64] f32
constexpr int kOffSum = kOffMax + 2 * 2 * kTileRows * 4;     // [2 warpgroups][64] f32
constexpr int kOffBar = kOffSum + 2 * kTileRows * 4;         // [2 stages][9 column blocks] u64 mbarriers
constexpr int kSmemBytes = kOffBar + 2 * kColBlocks * 8;
static_assert(kSmemBytes <= 227 * 1024, "the kernel's shared memory exceeds the H100/H200 limit");

// Byte offset of 16-byte chunk `chunk` (8 bf16) of row `row` in a 64-row tile of column blocks.
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * kBlockBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

using ::attnkit::cuda::fast_exp2;
using ::attnkit::cuda::quad_max;
using ::attnkit::cuda::quad_sum;

// Warp 0: the TMA boxes of tile j into stage j % 2, column block 0 first; block cb is counted on
// bars + 8 cb. Boxes past the item's KV end are not loaded (the consumers zero those rows); each
// barrier expects exactly the bytes that are.
__device__ __forceinline__ void issue_tile(const void* map, const AttendParams& p, const WorkItem& w,
                                           uint32_t s_stage, uint32_t bars, int j, int lane) {
  const int n0 = w.n0 + j * kTileTokens;
  const int box_rows = min(p.page_size, kTileTokens);
  const int boxes = min(kTileTokens / box_rows, (w.kv_hi - n0 + box_rows - 1) / box_rows);
  if (lane < kColBlocks) hopper::mbar_expect_tx(bars + 8 * lane, static_cast<uint32_t>(boxes * box_rows * 128));
  __syncwarp();
  const int32_t* pages = p.page_indices + w.page_begin;
  for (int idx = lane; idx < boxes * kColBlocks; idx += 32) {
    const int cb = idx / boxes;
    const int b = idx % boxes;
    const uint32_t bar = bars + 8 * cb;
    const int pos = n0 + b * box_rows;
    const int slot = pages[pos / p.page_size] * p.page_size + pos % p.page_size;
    hopper::load_2d(s_stage + cb * kBlockBytes + b * box_rows * 128, map, cb * 64, slot, bar);
  }
}

}  // namespace attend_detail

__global__ void __launch_bounds__(attend_detail::kThreads, 1)
    attend_kernel(const __grid_constant__ LatentMap map, const AttendParams p) {
  namespace ad = attend_detail;
  namespace mma = cuda::wgmma;
  extern __shared__ __align__(1024) unsigned char smem[];
  if (static_cast<int>(blockIdx.x) >= p.counts[0]) return;  // past this plan's items
  const WorkItem w = p.work[blockIdx.x];
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int lane = tid % 32;
  const int row_base = ((tid % 128) / 32) * 16 + lane / 4;  // this thread's rows: row_base, + 8
  const uint32_t s_q = hopper::smem_addr(smem);
  const uint32_t s_p = s_q + ad::kOffP;
  float* s_max = reinterpret_cast<float*>(smem + ad::kOffMax);
  float* s_sum = reinterpret_cast<float*>(smem + ad::kOffSum);
  const uint32_t s_bar = s_q + ad::kOffBar;
  const void* g_map = &map;

  if (tid < 2 * ad::kColBlocks) hopper::mbar_init(s_bar + 8 * tid, 1);
  // Q rows, zero past the item's end.
  const __nv_bfloat16* g_q = static_cast<const __nv_bfloat16*>(p.q);
  constexpr int kQChunks = kHeadDimQk / 8;
  for (int idx = tid; idx < kTileRows * kQChunks; idx += ad::kThreads) {
    const int r = idx / kQChunks;
    const int c = idx % kQChunks;
    const bool valid = r < w.rows;
    const __nv_bfloat16* src = valid ? g_q + (int64_t{w.q_row0} + r) * kHeadDimQk + c * 8 : g_q;
    ad::cp_async_16(s_q + ad::tile_offset(r, c), src, valid);
  }
  asm volatile("cp.async.commit_group;\n" ::);
  __syncthreads();  // the barriers are initialised
  if (tid < 32) {
    for (int j = 0; j < min(2, w.num_tiles); ++j) ad::issue_tile(g_map, p, w, s_q + ad::kOffK + j * ad::kTileBytes, s_bar + 8 * ad::kColBlocks * j, j, lane);
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
  mma::fence_proxy_async();
  __syncthreads();  // Q has landed, for both warpgroups' wgmma

  const RowWindow win(p, w);

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  for (int j = 0; j < w.num_tiles; ++j) {
    const int stage = j & 1;
    const uint32_t s_k = s_q + ad::kOffK + stage * ad::kTileBytes;
    const int n0 = w.n0 + j * kTileTokens;
    if (j >= 1) {
      __syncthreads();  // both warpgroups are done with tile j - 1: its stage takes tile j + 1
      if (tid < 32 && j + 1 < w.num_tiles) {
        ad::issue_tile(g_map, p, w, s_q + ad::kOffK + ((j + 1) & 1) * ad::kTileBytes,
                       s_bar + 8 * ad::kColBlocks * ((j + 1) & 1), j + 1, lane);
      }
    }
    const uint32_t s_bars = s_bar + 8 * ad::kColBlocks * stage;
    const uint32_t parity = (j >> 1) & 1;
    // Rows past the KV end were not loaded: zero them (once every block has landed), so that
    // P = 0 meets finite V.
    const int valid = min(kTileTokens, w.kv_hi - n0);
    if (valid < kTileTokens) {
      for (int cb = 0; cb < ad::kColBlocks; ++cb) hopper::mbar_wait(s_bars + 8 * cb, parity);
      for (int idx = tid; idx < (kTileTokens - valid) * kQChunks; idx += ad::kThreads) {
        const int r = valid + idx / kQChunks;
        const int c = idx % kQChunks;
        *reinterpret_cast<uint4*>(smem + ad::kOffK + stage * ad::kTileBytes + ad::tile_offset(r, c)) = make_uint4(0, 0, 0, 0);
      }
      mma::fence_proxy_async();
      __syncthreads();
    }

    // S = Q K^T for this warpgroup's 32 tokens.
    float s[16];
    mma::fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDimQk / 16; ++kk) {
      if (kk % 4 == 0) hopper::mbar_wait(s_bars + 8 * (kk / 4), parity);  // this column block has landed
      const uint32_t col = (kk / 4) * ad::kBlockBytes + (kk % 4) * 32;
      const uint64_t desc_q = mma::make_desc(s_q + col, 16, 1024);
      const uint64_t desc_k = mma::make_desc(s_k + col + wg * 32 * 128, 16, 1024);
      hopper::wgmma_m64n32_ss<0>(s, desc_q, desc_k, kk > 0);
    }
    mma::commit();
    mma::wait_all();
    mma::fence_regs(s);

    // Scale, soft-cap, mask: s[nb * 4 + 2h + e] is row row_base + 8h, token n0 + 32 wg + 8 nb + 2 (lane % 4) + e.
    if (win.soft_cap) {
#pragma unroll
      for (int i = 0; i < 16; ++i) s[i] = win.cap(s[i]);
    }
    if (win.tile_masked(n0)) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int2 vis = win.visible(row_base + 8 * h);
#pragma unroll
        for (int nb = 0; nb < 4; ++nb) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int t = n0 + wg * 32 + nb * 8 + 2 * (lane % 4) + e;
            if (t < vis.x || t >= vis.y) s[nb * 4 + 2 * h + e] = -INFINITY;
          }
        }
      }
    }
    // Row maxima of both warpgroups' halves.
    float* s_max_j = s_max + (j & 1) * 2 * kTileRows;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) mx = fmaxf(mx, fmaxf(s[nb * 4 + 2 * h], s[nb * 4 + 2 * h + 1]));
      mx = ad::quad_max(mx);
      if (lane % 4 == 0) s_max_j[wg * kTileRows + row_base + 8 * h] = mx;
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row_base + 8 * h;
      const float mx = fmaxf(s_max_j[r], s_max_j[kTileRows + r]);
      const float m_new = fmaxf(m[h], mx * win.exp_scale);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: P = 0, not NaN
      const float corr = ad::fast_exp2(m[h] - base);
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        s[nb * 4 + 2 * h] = ad::fast_exp2(fmaf(s[nb * 4 + 2 * h], win.exp_scale, -base));
        s[nb * 4 + 2 * h + 1] = ad::fast_exp2(fmaf(s[nb * 4 + 2 * h + 1], win.exp_scale, -base));
        sum += s[nb * 4 + 2 * h] + s[nb * 4 + 2 * h + 1];
      }
      l[h] = l[h] * corr + sum;
#pragma unroll
      for (int nb = 0; nb < 32; ++nb) {
        o[nb * 4 + 2 * h] *= corr;
        o[nb * 4 + 2 * h + 1] *= corr;
      }
      // P for this warpgroup's tokens: chunk 4 wg + nb of row r, two tokens a thread.
#pragma unroll
      for (int nb = 0; nb < 4; ++nb) {
        const __nv_bfloat162 pv = __floats2bfloat162_rn(s[nb * 4 + 2 * h], s[nb * 4 + 2 * h + 1]);
        *reinterpret_cast<__nv_bfloat162*>(smem + ad::kOffP + ad::tile_offset(r, wg * 4 + nb) + 4 * (lane % 4)) = pv;
      }
    }
    mma::fence_proxy_async();
    __syncthreads();  // the whole P is written

    // O[:, 256 wg .. +256] += P V.
    mma::fence_regs(o);
    mma::fence();
#pragma unroll
    for (int kk = 0; kk < kTileTokens / 16; ++kk) {
      const uint64_t desc_p = mma::make_desc(s_p + kk * 32, 16, 1024);
      const uint64_t desc_v = mma::make_desc(s_k + 4 * wg * ad::kBlockBytes + kk * 16 * 128, ad::kBlockBytes, 1024);
      hopper::wgmma_m64n256_ss_tb(o, desc_p, desc_v);
    }
    mma::commit();
    mma::wait_all();
    mma::fence_regs(o);
  }

  // Epilogue: the row sums of both halves, then this warpgroup's 256 columns.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = ad::quad_sum(l[h]);
    if (lane % 4 == 0) s_sum[wg * kTileRows + row_base + 8 * h] = sum;
  }
  __syncthreads();
  const bool split = w.partial >= 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row_base + 8 * h;
    if (r >= w.rows) continue;
    const float total = s_sum[r] + s_sum[kTileRows + r];
    const float inv = total > 0.0f ? 1.0f / total : 0.0f;  // a row that sees nothing: zeros
    if (split) {
      float* g_o = p.partial_o + (int64_t{w.partial} * kTileRows + r) * kHeadDimVo + wg * 256 + 2 * (lane % 4);
#pragma unroll
      for (int nb = 0; nb < 32; ++nb)
        *reinterpret_cast<float2*>(g_o + nb * 8) = make_float2(o[nb * 4 + 2 * h] * inv, o[nb * 4 + 2 * h + 1] * inv);
      if (wg == 0 && lane % 4 == 0)
        p.partial_lse[int64_t{w.partial} * kTileRows + r] = total > 0.0f ? (m[h] + log2f(total)) * RowWindow::kLn2 : -INFINITY;
    } else {
      if (p.lse != nullptr && wg == 0 && lane % 4 == 0)
        p.lse[int64_t{w.q_row0} + r] = total > 0.0f ? (m[h] + log2f(total)) * RowWindow::kLn2 : -INFINITY;
      __nv_bfloat16* g_o =
          static_cast<__nv_bfloat16*>(p.out) + (int64_t{w.q_row0} + r) * kHeadDimVo + wg * 256 + 2 * (lane % 4);
#pragma unroll
      for (int nb = 0; nb < 32; ++nb)
        *reinterpret_cast<__nv_bfloat162*>(g_o + nb * 8) =
            __floats2bfloat162_rn(o[nb * 4 + 2 * h] * inv, o[nb * 4 + 2 * h + 1] * inv);
    }
  }
}

}  // namespace attnkit::mla
