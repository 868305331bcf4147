// The `mla` attention kernel. One CTA, two warpgroups, one work item (plan.h): 64 query rows of one
// request (heads x new tokens; rows past the item's end are zero) against the item's KV tiles.
//   Q: 64 x 576 bf16, loaded once with cp.async into the 128-byte-swizzled layout wgmma reads.
//   K tiles: 64 tokens x 576, two stages; TMA boxes a (page piece, 64-column block), each column
//     block counted on its own mbarrier, so S starts on the first block while the others land.
//     The same tile is V: its first 512 columns.
//   The roles are split so that the tensor cores work while the softmax runs:
//   - warpgroup 0 computes S_j = Q K_j^T for all 64 tokens (m64n64, 36 k-steps), the softmax (it
//     holds whole rows: no exchange), writes P_j (bf16) over the tile's RoPE column block (S_j has
//     read it; 64 x 64 bf16 is one block) and the rows' rescale factors, then accumulates its
//     half of O (64 x 256 f32, m64n256) and issues S_{j+1} behind it;
//   - warpgroup 1 waits for P_j, rescales its half of O and accumulates it from P_j and its 256 V
//     columns; its first warp then loads tile j + 2 into the stage both have released.
//   mbarriers order them: per stage, one a column block (full), one for both warpgroups' release
//   (empty) and one for P_j (p_ready).
#pragma once

#include <cuda_bf16.h>

#include <cmath>

#include "backends/mla/config.h"
#include "backends/mla/kernels/attend.h"
#include "backends/mla/kernels/hopper.cuh"
#include "backends/mla/kernels/row_window.cuh"
#include "cuda/row_math.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/wgmma_ops.cuh"

namespace attnkit::mla {

namespace attend_detail {

constexpr int kThreads = 256;
constexpr int kBlockBytes = kTileRows * 128;                 // one 64-column block of 64 rows
constexpr int kColBlocks = kHeadDimQk / 64;                  // 9
constexpr int kRopeBlock = kColBlocks - 1;                   // the block P_j takes over
constexpr int kTileBytes = kColBlocks * kBlockBytes;         // 73728: Q, or one K stage
constexpr int kOffK = kTileBytes;                            // two stages after Q
constexpr int kOffCorr = 3 * kTileBytes;                     // [2 stages][64] f32: P_j's rescale factors
constexpr int kOffSum = kOffCorr + 2 * kTileRows * 4;        // [64] f32 row sums, then [64] f32 row maxima
constexpr int kOffBar = kOffSum + 2 * kTileRows * 4;         // u64 mbarriers:
constexpr int kBarFull = 0;                                  //   [2 stages][9 column blocks]
constexpr int kBarEmpty = 2 * kColBlocks;                    //   [2 stages]: 8 warps release
constexpr int kBarPReady = kBarEmpty + 2;                    //   [2 stages]: warpgroup 0's 128 threads
constexpr int kNumBars = kBarPReady + 2;
constexpr int kSmemBytes = kOffBar + kNumBars * 8;
static_assert(kSmemBytes <= 227 * 1024, "the kernel's shared memory exceeds the H100/H200 limit");
static_assert(kTileTokens == 64, "P_j (64 rows x kTileTokens bf16) fills exactly one column block");

constexpr int kSoftmaxGroup = 0;  // warpgroup 0: S, softmax, O[:, 0..256)
constexpr int kEpilogueBarrier = 1;  // named barrier: both warpgroups, before the row sums are read
constexpr int kGroupBarrier = 2;     // named barrier: warpgroup 0 alone

// Byte offset of 16-byte chunk `chunk` (8 bf16) of row `row` in a 64-row tile of column blocks.
__device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * kBlockBytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

using ::attnkit::cuda::fast_exp2;
using ::attnkit::cuda::quad_max;
using ::attnkit::cuda::quad_sum;

// One warp: the TMA boxes of tile j into stage j % 2, column block 0 first; block cb is counted on
// bars + 8 cb. Boxes past the item's KV end are not loaded (warpgroup 0 zeroes those rows); each
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

// Shared-memory addresses of the CTA's parts.
struct Smem {
  uint32_t q, bars;
  __device__ __forceinline__ uint32_t stage(int s) const { return q + kOffK + s * kTileBytes; }
  __device__ __forceinline__ uint32_t p_block(int s) const { return stage(s) + kRopeBlock * kBlockBytes; }
  __device__ __forceinline__ uint32_t full(int s) const { return bars + 8 * (kBarFull + kColBlocks * s); }
  __device__ __forceinline__ uint32_t empty(int s) const { return bars + 8 * (kBarEmpty + s); }
  __device__ __forceinline__ uint32_t p_ready(int s) const { return bars + 8 * (kBarPReady + s); }
};

// O[:, 256 half .. +256] += P V of tile j's stage, issued and committed: P from the stage's RoPE
// block (K-major), V MN-major (tokens down the rows).
__device__ __forceinline__ void issue_pv(float (&o)[128], const Smem& sm, int stage, int half) {
  namespace mma = ::attnkit::cuda::wgmma;
  mma::fence_regs(o);
  mma::fence();
  const uint64_t p0 = mma::make_desc(sm.p_block(stage), 16, 1024);
  const uint64_t v0 = mma::make_desc(sm.stage(stage) + 4 * half * kBlockBytes, kBlockBytes, 1024);
#pragma unroll
  for (int kk = 0; kk < kTileTokens / 16; ++kk)
    hopper::wgmma_m64n256_ss_tb(o, mma::advance_desc(p0, kk * 32), mma::advance_desc(v0, kk * 16 * 128));
  mma::commit();
}

// S [64 x 64] = Q K^T of tile j's stage, issued and committed: each column block's four k-steps as
// soon as that block has landed, so the products start while the tile's later blocks still load.
// The waits are PTX loops (mbar_wait_in_ptx): a C++ loop between the products would make ptxas
// serialise them.
__device__ __forceinline__ void issue_s(float (&s)[32], const Smem& sm, int stage, uint32_t parity) {
  namespace mma = ::attnkit::cuda::wgmma;
  mma::fence_regs(s);
  const uint64_t q0 = mma::make_desc(sm.q, 16, 1024), k0 = mma::make_desc(sm.stage(stage), 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kHeadDimQk / 16; ++kk) {
    if (kk % 4 == 0) {
      ::attnkit::cuda::tma::mbar_wait_in_ptx(sm.full(stage) + 8 * (kk / 4), parity);
      mma::fence();
    }
    const uint32_t col = (kk / 4) * kBlockBytes + (kk % 4) * 32;
    mma::wgmma_ss<__nv_bfloat16, 64>(s, mma::advance_desc(q0, col), mma::advance_desc(k0, col), kk > 0);
  }
  mma::commit();
}

// Warpgroup 0: tile j's rows past the item's KV end were not loaded; once every block of the
// stage has landed, they become zeros (P is 0 there, but 0 x NaN is not), fenced for wgmma.
__device__ __forceinline__ void zero_tail(unsigned char* smem, const Smem& sm, const WorkItem& w, int j, int wtid) {
  const int stage = j & 1;
  const int valid = min(kTileTokens, w.kv_hi - (w.n0 + j * kTileTokens));
  if (valid >= kTileTokens) return;
  for (int cb = 0; cb < kColBlocks; ++cb) hopper::mbar_wait(sm.full(stage) + 8 * cb, (j >> 1) & 1);
  constexpr int kChunks = kHeadDimQk / 8;
  for (int idx = wtid; idx < (kTileTokens - valid) * kChunks; idx += 128) {
    const int r = valid + idx / kChunks;
    *reinterpret_cast<uint4*>(smem + kOffK + stage * kTileBytes + tile_offset(r, idx % kChunks)) = make_uint4(0, 0, 0, 0);
  }
  ::attnkit::cuda::wgmma::fence_proxy_async();
  named_sync(kGroupBarrier, 128);
}

// A warp's release of a stage (or of P): its lanes are done with it.
__device__ __forceinline__ void warp_arrive(uint32_t bar, int lane) {
  __syncwarp();
  if (lane == 0) hopper::mbar_arrive(bar);
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
  const ad::Smem sm{hopper::smem_addr(smem), hopper::smem_addr(smem) + ad::kOffBar};
  float* s_corr = reinterpret_cast<float*>(smem + ad::kOffCorr);
  float* s_sum = reinterpret_cast<float*>(smem + ad::kOffSum);
  float* s_max = s_sum + kTileRows;
  const void* g_map = &map;

  if (tid < 2 * ad::kColBlocks) hopper::mbar_init(sm.bars + 8 * (ad::kBarFull + tid), 1);
  if (tid < 2) {
    hopper::mbar_init(sm.empty(tid), 8);      // every warp of both warpgroups
    hopper::mbar_init(sm.p_ready(tid), 128);  // every thread of warpgroup 0, after its P stores
  }
  // Q rows, zero past the item's end.
  const __nv_bfloat16* g_q = static_cast<const __nv_bfloat16*>(p.q);
  constexpr int kQChunks = kHeadDimQk / 8;
  for (int idx = tid; idx < kTileRows * kQChunks; idx += ad::kThreads) {
    const int r = idx / kQChunks;
    const int c = idx % kQChunks;
    const bool valid = r < w.rows;
    const __nv_bfloat16* src = valid ? g_q + (int64_t{w.q_row0} + r) * kHeadDimQk + c * 8 : g_q;
    ad::cp_async_16(sm.q + ad::tile_offset(r, c), src, valid);
  }
  asm volatile("cp.async.commit_group;\n" ::);
  __syncthreads();  // the barriers are initialised
  if (tid < 32) {
    for (int j = 0; j < min(2, w.num_tiles); ++j) ad::issue_tile(g_map, p, w, sm.stage(j), sm.full(j), j, lane);
  }
  asm volatile("cp.async.wait_group 0;\n" ::);
  mma::fence_proxy_async();
  __syncthreads();  // Q has landed, for both warpgroups' wgmma

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;

  // Epilogue: each warpgroup's 256 columns, normalised by warpgroup 0's row sums.
  auto write_out = [&]() {
    ad::named_sync(ad::kEpilogueBarrier, ad::kThreads);
    const bool split = w.partial >= 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row_base + 8 * h;
      if (r >= w.rows) continue;
      const float total = s_sum[r];
      const float m_row = s_max[r];
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;  // a row that sees nothing: zeros
      if (split) {
        float* g_o = p.partial_o + (int64_t{w.partial} * kTileRows + r) * kHeadDimVo + wg * 256 + 2 * (lane % 4);
#pragma unroll
        for (int nb = 0; nb < 32; ++nb)
          *reinterpret_cast<float2*>(g_o + nb * 8) = make_float2(o[nb * 4 + 2 * h] * inv, o[nb * 4 + 2 * h + 1] * inv);
        if (wg == 0 && lane % 4 == 0)
          p.partial_lse[int64_t{w.partial} * kTileRows + r] = total > 0.0f ? (m_row + log2f(total)) * RowWindow::kLn2 : -INFINITY;
      } else {
        if (p.lse != nullptr && wg == 0 && lane % 4 == 0)
          p.lse[int64_t{w.q_row0} + r] = total > 0.0f ? (m_row + log2f(total)) * RowWindow::kLn2 : -INFINITY;
        __nv_bfloat16* g_o =
            static_cast<__nv_bfloat16*>(p.out) + (int64_t{w.q_row0} + r) * kHeadDimVo + wg * 256 + 2 * (lane % 4);
#pragma unroll
        for (int nb = 0; nb < 32; ++nb)
          *reinterpret_cast<__nv_bfloat162*>(g_o + nb * 8) =
              __floats2bfloat162_rn(o[nb * 4 + 2 * h] * inv, o[nb * 4 + 2 * h + 1] * inv);
      }
    }
  };

  // Warpgroup 1 first, on its own path to its end: ptxas serialises the products when two
  // warpgroups' wgmma code paths meet again (the join reads as a divergent path).
  if (wg != ad::kSoftmaxGroup) {
    const int wtid = tid - 128;
    const int warp = wtid / 32;
    for (int j = 0; j < w.num_tiles; ++j) {
      const int stage = j & 1;
      hopper::mbar_wait(sm.p_ready(stage), (j >> 1) & 1);
      const float c0 = s_corr[stage * kTileRows + row_base];
      const float c1 = s_corr[stage * kTileRows + row_base + 8];
      mma::fence_regs(o);
      // Most tiles move no row's max (RowWindow::kMaxSlack): 128 multiplies a thread skipped.
      if (__any_sync(0xffffffffu, c0 != 1.0f || c1 != 1.0f)) {
#pragma unroll
        for (int nb = 0; nb < 32; ++nb) {
          o[nb * 4 + 0] *= c0;
          o[nb * 4 + 1] *= c0;
          o[nb * 4 + 2] *= c1;
          o[nb * 4 + 3] *= c1;
        }
      }
      ad::issue_pv(o, sm, stage, 1);
      mma::wait<0>();
      mma::fence_regs(o);
      ad::warp_arrive(sm.empty(stage), lane);
      // The stage both warpgroups have released takes tile j + 2.
      if (warp == 0 && j + 2 < w.num_tiles) {
        if (lane == 0) hopper::mbar_wait(sm.empty(stage), (j >> 1) & 1);
        __syncwarp();
        ad::issue_tile(g_map, p, w, sm.stage(stage), sm.full(stage), j + 2, lane);
      }
    }
    write_out();
    return;
  }
  const RowWindow win(p, w);
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
  float s[32];
  if (w.num_tiles > 0) {
    ad::zero_tail(smem, sm, w, 0, tid);
    ad::issue_s(s, sm, 0, 0);
  }
  // Tile j's softmax once S_j has landed: P_j over the stage's RoPE block, its rescale factors
  // beside it, p_ready; then O[:, 0..256) = O corr + P_j V_j issued (not waited for).
  auto softmax_and_pv = [&](int j) {
    const int stage = j & 1;
    const int n0 = w.n0 + j * kTileTokens;
    mma::wait<0>();  // S_j done
    mma::fence_regs(s);
    // S has read the whole stage, all four warps' parts: the RoPE block may take P.
    ad::named_sync(ad::kGroupBarrier, 128);
    // Scale, soft-cap, mask: s[nb * 4 + 2h + e] is row row_base + 8h, token n0 + 8 nb + 2 (lane % 4) + e.
    if (win.soft_cap) {
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = win.cap(s[i]);
    }
    if (win.tile_masked(n0)) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int2 vis = win.visible(row_base + 8 * h);
#pragma unroll
        for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int t = n0 + nb * 8 + 2 * (lane % 4) + e;
            if (t < vis.x || t >= vis.y) s[nb * 4 + 2 * h + e] = -INFINITY;
          }
        }
      }
    }
    float corr[2];
    bool moved = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) mx = fmaxf(mx, fmaxf(s[nb * 4 + 2 * h], s[nb * 4 + 2 * h + 1]));
      mx = ad::quad_max(mx);
      // m = -inf: any visible score moves it (-inf + slack). A row that does not move keeps
      // corr = 1 (exp2(0)), which warpgroup 1 reads as "nothing to rescale".
      const bool move = mx * win.exp_scale > m[h] + RowWindow::kMaxSlack;
      moved |= move;
      const float m_new = move ? mx * win.exp_scale : m[h];
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: P = 0, not NaN
      corr[h] = move ? ad::fast_exp2(m[h] - base) : 1.0f;
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        s[nb * 4 + 2 * h] = ad::fast_exp2(fmaf(s[nb * 4 + 2 * h], win.exp_scale, -base));
        s[nb * 4 + 2 * h + 1] = ad::fast_exp2(fmaf(s[nb * 4 + 2 * h + 1], win.exp_scale, -base));
        sum += s[nb * 4 + 2 * h] + s[nb * 4 + 2 * h + 1];
      }
      l[h] = l[h] * corr[h] + sum;
      const int r = row_base + 8 * h;
      if (lane % 4 == 0) s_corr[stage * kTileRows + r] = corr[h];
      // P: chunk nb of row r, two tokens a thread, over the stage's RoPE block.
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const __nv_bfloat162 pv = __floats2bfloat162_rn(s[nb * 4 + 2 * h], s[nb * 4 + 2 * h + 1]);
        *reinterpret_cast<__nv_bfloat162*>(smem + ad::kOffK + stage * ad::kTileBytes + ad::kRopeBlock * ad::kBlockBytes +
                                           ad::tile_offset(r, nb) + 4 * (lane % 4)) = pv;
      }
    }
    mma::fence_proxy_async();  // P's generic stores, before either warpgroup's wgmma reads them
    hopper::mbar_arrive(sm.p_ready(stage));
    ad::named_sync(ad::kGroupBarrier, 128);  // all of P is written, for this warpgroup's product

    // O[:, 0..256) = O corr + P_j V_j, then S_{j+1} behind it.
    mma::fence_regs(o);
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int nb = 0; nb < 32; ++nb) {
        o[nb * 4 + 0] *= corr[0];
        o[nb * 4 + 1] *= corr[0];
        o[nb * 4 + 2] *= corr[1];
        o[nb * 4 + 3] *= corr[1];
      }
    }
    ad::issue_pv(o, sm, stage, 0);
  };
  // Every wgmma wait unconditional (the last tile peeled off): ptxas then proves the accumulators
  // settled instead of serialising the products.
  int j = 0;
  for (; j + 1 < w.num_tiles; ++j) {
    softmax_and_pv(j);
    ad::zero_tail(smem, sm, w, j + 1, tid);
    ad::issue_s(s, sm, (j + 1) & 1, ((j + 1) >> 1) & 1);
    mma::wait<1>();  // P_j V_j done: this warpgroup is through with stage j
    mma::fence_regs(o);
    ad::warp_arrive(sm.empty(j & 1), lane);
  }
  if (w.num_tiles > 0) {
    softmax_and_pv(j);
    mma::wait<0>();
    mma::fence_regs(o);
    ad::warp_arrive(sm.empty(j & 1), lane);
  }
  // The row sums and maxima, for the other warpgroup's half of O.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float sum = ad::quad_sum(l[h]);
    if (lane % 4 == 0) {
      s_sum[row_base + 8 * h] = sum;
      s_max[row_base + 8 * h] = m[h];
    }
  }
  write_out();
}

}  // namespace attnkit::mla
