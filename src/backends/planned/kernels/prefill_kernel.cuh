// The extend kernel's mainloop: one CTA takes one work item (a q tile of GQA-packed rows of one
// request and KV head) through the paged K/V (cp.async, two stages) with wgmma (head dims 64, 128)
// or mma.sync (256) and an online softmax in registers. Tile shapes and the dispatch live in
// prefill.cu; the configuration and K/V tile loads in prefill_copy.cuh, fragment helpers in
// prefill_tile.cuh, the wgmma instructions in prefill_wgmma.cuh.
#pragma once

#include <cmath>

#include "backends/planned/kernels/prefill_copy.cuh"

namespace attnkit::planned {

template <typename C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) prefill_kernel(const PrefillParams p) {
  using T = typename C::T;
  using TKv = typename C::TKv;
  constexpr int kD = C::kHeadDim;
  constexpr int kN = C::kBlockN;
  constexpr int kR = C::kRowTiles;
  constexpr float kNegInf = -INFINITY;

  extern __shared__ __align__(1024) unsigned char smem[];  // 1024: wgmma's 128-byte swizzle atoms
  T* s_q = reinterpret_cast<T*>(smem);                                           // [kBlockM, kD]
  T* s_k = reinterpret_cast<T*>(smem + C::kBlockM * kD * 2);                      // [2][kN, kD]
  T* s_v = reinterpret_cast<T*>(smem + C::kBlockM * kD * 2 + 2 * C::kTileBytes);  // [2][kN, kD]
  int64_t* s_slot = reinterpret_cast<int64_t*>(smem + C::kBlockM * kD * 2 + 4 * C::kTileBytes);  // [2][kN]

  const PrefillWorkItem w = p.work[blockIdx.x];
  const int kv_head = blockIdx.y;
  const int req = w.request_idx;
  const int group = p.num_qo_heads / p.num_kv_heads;
  const int qo_start = p.qo_indptr[req];
  const int qo_len = p.qo_indptr[req + 1] - qo_start;
  const int page_begin = p.page_begin[req];
  const int num_pages = p.kv_page_indptr[req + 1] - p.kv_page_indptr[req];
  const int kv_len = num_pages == 0 ? 0 : (num_pages - 1) * p.page_size + p.kv_last_page_len[req];
  const int prefix = p.prefix_lens[req];
  const int packed_len = qo_len * group;
  const int row0 = w.qo_tile_idx * C::kBlockM;
  const int rows_here = min(C::kBlockM, packed_len - row0);
  if (rows_here <= 0) return;

  const bool custom = p.custom_mask_indptr != nullptr && p.custom_mask_indptr[req + 1] > p.custom_mask_indptr[req];
  const int pos_min = prefix + row0 / group;
  const int pos_max = prefix + (row0 + rows_here - 1) / group;
  int kv_lo = w.kv_begin;
  int kv_hi = w.kv_end < 0 ? kv_len : min(w.kv_end, kv_len);
  if (!custom && p.causal) kv_hi = min(kv_hi, pos_max + 1);
  if (p.window_left >= 0) kv_lo = max(kv_lo, pos_min - p.window_left);
  const int num_tiles = kv_hi > kv_lo ? (kv_hi - kv_lo + kN - 1) / kN : 0;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const TKv* g_k = static_cast<const TKv*>(p.k_pool);
  const TKv* g_v = static_cast<const TKv*>(p.v_pool);
  const int32_t* g_pages = p.kv_page_indices + page_begin;

  // Q tile: packed row r is token (row0 + r) / group, head kv_head * group + (row0 + r) % group.
  {
    const T* g_q = static_cast<const T*>(p.q);
    for (int idx = tid; idx < C::kBlockM * C::kChunks; idx += C::kThreads) {
      const int r = idx / C::kChunks;
      const int chunk = idx % C::kChunks;
      const int packed = row0 + r;
      const bool valid = r < rows_here;
      const T* src = g_q;
      if (valid) {
        const int64_t token = qo_start + packed / group;
        const int head = kv_head * group + packed % group;
        src = g_q + (token * p.num_qo_heads + head) * kD + chunk * 8;
      }
      tile::cp_async_16(tile::smem_addr(s_q) + detail::tile_offset<C, C::kBlockM>(r, chunk), src, valid);
    }
    tile::cp_async_commit();
  }
  // The slots of tiles 0 and 1; later tiles' slots are looked up one tile ahead, inside the loop,
  // so no cp.async waits on a page-table read.
  if (tid < kN) {
    s_slot[tid] = detail::kv_slot(p, g_pages, kv_lo + tid, kv_hi);
    s_slot[kN + tid] = detail::kv_slot(p, g_pages, kv_lo + kN + tid, kv_hi);
  }
  __syncthreads();
  if (num_tiles > 0) {
    detail::load_kv_tiles<C>(p, g_k, g_v, s_slot, kv_head, s_k, s_v);
    tile::cp_async_commit();
  }

  // This thread's accumulator rows: (rt, h) is tile row warp * 16 * kR + rt * 16 + lane / 4 + 8 h.
  // Its token index within the request; rows past the end are dropped, so clamp them to keep their
  // mask reads in bounds. Recomputed in the (rare) masked tiles rather than held in registers.
  auto row_qo_idx = [&](int rt, int h) {
    return min((row0 + warp * 16 * kR + rt * 16 + lane / 4 + 8 * h) / group, qo_len - 1);
  };
  // KV positions visible to every row of the tile: tiles inside need no mask.
  const int tile_unmasked_hi = custom || !p.causal ? kv_hi : min(kv_hi, pos_min + 1);
  const int tile_unmasked_lo = p.window_left >= 0 ? max(kv_lo, pos_max - p.window_left) : kv_lo;
  const uint8_t* g_mask = custom ? p.custom_mask + p.custom_mask_indptr[req] : nullptr;
  const bool soft_cap = p.logits_soft_cap > 0.0f;
  // Logits in log2 units: exp(x) = exp2(x * log2 e). e4m3 keys: q.(k * k_scale) = k_scale (q.k).
  const float qk_scale = p.sm_scale * (C::kFp8 ? p.k_scale : 1.0f);
  const float logit_scale = soft_cap ? qk_scale / p.logits_soft_cap : qk_scale * detail::kLog2e;
  const float cap_log2 = p.logits_soft_cap * detail::kLog2e;
  const float exp_scale = soft_cap ? 1.0f : logit_scale;  // raw S -> log2 units, inside the exp2

  float r_o[kR][kD / 8][4];  // [16 kR, kD] per warp: O accumulator
  float r_m[kR][2];          // running row max, log2 units
  float r_l[kR][2];          // running row sum (this lane's columns only until the epilogue)
#pragma unroll
  for (int rt = 0; rt < kR; ++rt) {
#pragma unroll
    for (int nb = 0; nb < kD / 8; ++nb) r_o[rt][nb][0] = r_o[rt][nb][1] = r_o[rt][nb][2] = r_o[rt][nb][3] = 0.0f;
    r_m[rt][0] = r_m[rt][1] = kNegInf;
    r_l[rt][0] = r_l[rt][1] = 0.0f;
  }
  uint32_t r_qf[C::kQInRegs ? kR : 1][C::kQInRegs ? kD / 16 : 1][4];  // Q fragments when kept in registers
  const uint32_t s_q_addr = tile::smem_addr(s_q);
  const int warp_row = warp * 16 * kR;

  for (int j = 0; j < num_tiles; ++j) {
    tile::cp_async_wait<0>();
    if constexpr (C::kWgmma) wgmma::fence_proxy_async();
    __syncthreads();  // tile j is in shared memory and every warp is done with tile j - 1's buffers
    const int n0 = kv_lo + j * kN;
    if (j + 1 < num_tiles) {
      const int nxt = (j + 1) & 1;
      detail::load_kv_tiles<C>(p, g_k, g_v, s_slot + nxt * kN, kv_head, s_k + nxt * kN * kD, s_v + nxt * kN * kD);
      tile::cp_async_commit();
    }
    // Tile j + 2's slots: the page-table read is issued now and stored after this tile's math, into
    // the stage tile j used (its loads were issued last iteration).
    int64_t next_slot = -1;
    if (tid < kN && j + 2 < num_tiles) next_slot = detail::kv_slot(p, g_pages, n0 + 2 * kN + tid, kv_hi);
    if constexpr (C::kQInRegs) {
      if (j == 0) {
#pragma unroll
        for (int rt = 0; rt < kR; ++rt)
#pragma unroll
          for (int kk = 0; kk < kD / 16; ++kk)
            tile::ldmatrix_x4(r_qf[rt][kk], s_q_addr + detail::tile_offset<C, C::kBlockM>(warp_row + rt * 16 + lane % 16, 2 * kk + lane / 16));
      }
    }
    const uint32_t s_k_addr = tile::smem_addr(s_k + (j & 1) * kN * kD);
    const uint32_t s_v_addr = tile::smem_addr(s_v + (j & 1) * kN * kD);

    // S = Q K^T  [16 kR, kN] per warp
    float r_s[kR][kN / 8][4];
    if constexpr (C::kWgmma) {
      // The warpgroup's 64 rows of Q against the whole K tile, 16 columns of the head dim a step.
      float(&r_sw)[kN / 2] = reinterpret_cast<float(&)[kN / 2]>(r_s[0]);
      const uint32_t s_q_wg = s_q_addr + (warp / 4) * 64 * 128;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        // Column block kk / 4 (a block is rows x 128 bytes), then 32 bytes (16 elements) into it.
        const uint64_t desc_q = wgmma::make_desc(s_q_wg + (kk / 4) * C::kBlockM * 128 + (kk % 4) * 32, 16, 1024);
        const uint64_t desc_k = wgmma::make_desc(s_k_addr + (kk / 4) * kN * 128 + (kk % 4) * 32, 16, 1024);
        wgmma::wgmma_ss<T, kN>(r_sw, desc_q, desc_k, kk > 0);
      }
      wgmma::commit();
      wgmma::wait_all();
      wgmma::fence_regs(r_sw);
    } else {
#pragma unroll
      for (int rt = 0; rt < kR; ++rt)
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb) r_s[rt][nb][0] = r_s[rt][nb][1] = r_s[rt][nb][2] = r_s[rt][nb][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t a[kR][4];
#pragma unroll
        for (int rt = 0; rt < kR; ++rt) {
          if constexpr (C::kQInRegs) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[rt][i] = r_qf[rt][kk][i];
          } else {
            tile::ldmatrix_x4(a[rt], s_q_addr + detail::tile_offset<C, C::kBlockM>(warp_row + rt * 16 + lane % 16, 2 * kk + lane / 16));
          }
        }
#pragma unroll
        for (int nb2 = 0; nb2 < kN / 16; ++nb2) {
          uint32_t b[4];
          tile::ldmatrix_x4(b, s_k_addr + detail::tile_offset<C, kN>(nb2 * 16 + lane % 8 + (lane / 16) * 8, 2 * kk + (lane / 8) % 2));
#pragma unroll
          for (int rt = 0; rt < kR; ++rt) {
            tile::mma_16816<T>(r_s[rt][2 * nb2], a[rt], b[0], b[1]);
            tile::mma_16816<T>(r_s[rt][2 * nb2 + 1], a[rt], b[2], b[3]);
          }
        }
      }
    }

    // Soft-cap turns S into log2-unit logits here; without it the scale is folded into the exp2
    // below (one FFMA an element). Mask only tiles that cross a boundary: each branch covers the
    // whole tile, so the common unmasked tile carries none of the mask's registers.
    if (soft_cap) {
#pragma unroll
      for (int rt = 0; rt < kR; ++rt)
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) r_s[rt][nb][e] = cap_log2 * tanhf(r_s[rt][nb][e] * logit_scale);
    }
    if (custom || n0 + kN > tile_unmasked_hi || n0 < tile_unmasked_lo) {
      // Row (rt, h) sees [lo, hi) (a custom mask further picks inside it).
#pragma unroll
      for (int rt = 0; rt < kR; ++rt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int qo_idx = row_qo_idx(rt, h);
          const int pos = prefix + qo_idx;
          const int hi = custom || !p.causal ? kv_hi : min(kv_hi, pos + 1);
          const int lo = p.window_left >= 0 ? max(kv_lo, pos - p.window_left) : kv_lo;
          const uint8_t* g_mask_row = custom ? g_mask + int64_t{qo_idx} * kv_len : nullptr;
#pragma unroll
          for (int nb = 0; nb < kN / 8; ++nb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int t = n0 + nb * 8 + 2 * (lane % 4) + e;
              const bool visible = t >= lo && t < hi && (!custom || g_mask_row[t] != 0);
              if (!visible) r_s[rt][nb][2 * h + e] = kNegInf;
            }
          }
        }
      }
    }

    // Online softmax: rescale O and l by exp2(m_old - m_new), P = exp2(S - m_new).
#pragma unroll
    for (int rt = 0; rt < kR; ++rt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = kNegInf;
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb) mx = fmaxf(mx, fmaxf(r_s[rt][nb][2 * h], r_s[rt][nb][2 * h + 1]));
        mx = tile::quad_max(mx);
        // Raw scores in, log2 units out (exp_scale > 0, so the max commutes with it).
        const float m_new = fmaxf(r_m[rt][h], mx * exp_scale);
        // A row with nothing visible yet keeps m = -inf; subtract 0 so exp2 gives 0, not NaN.
        const float base = m_new == kNegInf ? 0.0f : m_new;
        const float corr = tile::fast_exp2(r_m[rt][h] - base);
        r_m[rt][h] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb) {
          r_s[rt][nb][2 * h] = tile::fast_exp2(fmaf(r_s[rt][nb][2 * h], exp_scale, -base));
          r_s[rt][nb][2 * h + 1] = tile::fast_exp2(fmaf(r_s[rt][nb][2 * h + 1], exp_scale, -base));
          sum += r_s[rt][nb][2 * h] + r_s[rt][nb][2 * h + 1];
        }
        r_l[rt][h] = r_l[rt][h] * corr + sum;
#pragma unroll
        for (int nb = 0; nb < kD / 8; ++nb) {
          r_o[rt][nb][2 * h] *= corr;
          r_o[rt][nb][2 * h + 1] *= corr;
        }
      }
    }

    // O += P V: the S accumulator of two n8 blocks is exactly the A fragment of one k16 step.
    if constexpr (C::kWgmma) {
      uint32_t a[kN / 16][4];
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        a[kk][0] = tile::pack2<T>(r_s[0][2 * kk][0], r_s[0][2 * kk][1]);
        a[kk][1] = tile::pack2<T>(r_s[0][2 * kk][2], r_s[0][2 * kk][3]);
        a[kk][2] = tile::pack2<T>(r_s[0][2 * kk + 1][0], r_s[0][2 * kk + 1][1]);
        a[kk][3] = tile::pack2<T>(r_s[0][2 * kk + 1][2], r_s[0][2 * kk + 1][3]);
      }
      float(&r_ow)[kD / 2] = reinterpret_cast<float(&)[kD / 2]>(r_o[0]);
      wgmma::fence_regs(r_ow);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        // V is MN-major: 16 KV rows (2048 bytes) a step; the next 64 head-dim columns one block on.
        const uint32_t s_v_step = s_v_addr + kk * 16 * 128;
        const uint64_t desc_v = wgmma::make_desc(s_v_step, kN * 128, 1024);
        wgmma::wgmma_rs<T, kD>(r_ow, a[kk], desc_v);
      }
      wgmma::commit();
      wgmma::wait_all();
      wgmma::fence_regs(r_ow);
    } else {
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        uint32_t a[kR][4];
#pragma unroll
        for (int rt = 0; rt < kR; ++rt) {
          a[rt][0] = tile::pack2<T>(r_s[rt][2 * kk][0], r_s[rt][2 * kk][1]);
          a[rt][1] = tile::pack2<T>(r_s[rt][2 * kk][2], r_s[rt][2 * kk][3]);
          a[rt][2] = tile::pack2<T>(r_s[rt][2 * kk + 1][0], r_s[rt][2 * kk + 1][1]);
          a[rt][3] = tile::pack2<T>(r_s[rt][2 * kk + 1][2], r_s[rt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int nd2 = 0; nd2 < kD / 16; ++nd2) {
          uint32_t b[4];
          tile::ldmatrix_x4_trans(b, s_v_addr + detail::tile_offset<C, kN>(kk * 16 + lane % 8 + ((lane / 8) % 2) * 8, 2 * nd2 + lane / 16));
#pragma unroll
          for (int rt = 0; rt < kR; ++rt) {
            tile::mma_16816<T>(r_o[rt][2 * nd2], a[rt], b[0], b[1]);
            tile::mma_16816<T>(r_o[rt][2 * nd2 + 1], a[rt], b[2], b[3]);
          }
        }
      }
    }
    if (tid < kN && j + 2 < num_tiles) s_slot[(j & 1) * kN + tid] = next_slot;
  }

  // Epilogue: normalise and write. Split items leave sinks to the merge, which sees every split.
  const float v_scale = C::kFp8 ? p.v_scale : 1.0f;
  const bool split = w.partial_row >= 0;
#pragma unroll
  for (int rt = 0; rt < kR; ++rt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row + rt * 16 + lane / 4 + 8 * h;
      const float l = tile::quad_sum(r_l[rt][h]);
      const float m = r_m[rt][h];
      if (r >= rows_here) continue;
      const int packed = row0 + r;
      const int qo_idx = packed / group;
      const int head = kv_head * group + packed % group;
      const float lse = l > 0.0f ? (m + log2f(l)) * detail::kLn2 : kNegInf;
      float total = l;
      if (!split && p.sinks != nullptr && m != kNegInf) total += exp2f(p.sinks[head] * detail::kLog2e - m);
      // A fully masked row has nothing to average: zeros, never 0/0.
      const float inv = total > 0.0f ? v_scale / total : 0.0f;
      if (split) {
        const int64_t row = int64_t{w.partial_row + qo_idx} * p.num_qo_heads + head;
        float* g_o = p.partial_o + row * kD + 2 * (lane % 4);
#pragma unroll
        for (int nb = 0; nb < kD / 8; ++nb)
          *reinterpret_cast<float2*>(g_o + nb * 8) = make_float2(r_o[rt][nb][2 * h] * inv, r_o[rt][nb][2 * h + 1] * inv);
        if (lane % 4 == 0) p.partial_lse[row] = lse;
      } else {
        const int64_t row = int64_t{qo_start + qo_idx} * p.num_qo_heads + head;
        T* g_o = static_cast<T*>(p.out) + row * kD + 2 * (lane % 4);
#pragma unroll
        for (int nb = 0; nb < kD / 8; ++nb)
          *reinterpret_cast<uint32_t*>(g_o + nb * 8) = tile::pack2<T>(r_o[rt][nb][2 * h] * inv, r_o[rt][nb][2 * h + 1] * inv);
        if (p.lse != nullptr && lane % 4 == 0) p.lse[row] = lse;
      }
    }
  }
}

}  // namespace attnkit::planned
