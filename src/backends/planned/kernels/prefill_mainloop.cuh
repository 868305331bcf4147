// The extend kernel's mainloop math, one K/V tile a call: S = Q K^T and O += P V, on wgmma (a
// warpgroup's 64 rows against the whole tile, head dims 64 and 128) or on mma.sync (16 kR rows a
// warp, head dim 256), and the register-carried state they accumulate into. The tiles come from
// prefill_producer.cuh; the softmax between the two products is prefill_softmax.cuh.
#pragma once

#include "backends/planned/kernels/prefill_producer.cuh"

namespace attnkit::planned::prefill_detail {

// The register-carried state of this thread's accumulator rows, (rt, h) being tile row
// warp * 16 * kR + rt * 16 + lane / 4 + 8 h: O [16 kR, kD] a warp, the running row max (log2
// units) and the running row sum (this lane's columns only until the epilogue).
template <typename C>
using PrefillO = float[C::kRowTiles][C::kHeadDim / 8][4];
template <typename C>
using PrefillRowStat = float[C::kRowTiles][2];

template <typename C>
__device__ __forceinline__ void init_accum(PrefillO<C>& r_o, PrefillRowStat<C>& r_m, PrefillRowStat<C>& r_l) {
#pragma unroll
  for (int rt = 0; rt < C::kRowTiles; ++rt) {
#pragma unroll
    for (int nb = 0; nb < C::kHeadDim / 8; ++nb) r_o[rt][nb][0] = r_o[rt][nb][1] = r_o[rt][nb][2] = r_o[rt][nb][3] = 0.0f;
    r_m[rt][0] = r_m[rt][1] = -INFINITY;
    r_l[rt][0] = r_l[rt][1] = 0.0f;
  }
}

// S of one tile: [16 kR, kN] per warp, in the m16n8 accumulator layout.
template <typename C>
using PrefillScores = float[C::kRowTiles][C::kBlockN / 8][4];

// Q's A fragments, kept in registers when they are few (C::kQInRegs), else one unused slot.
template <typename C>
struct PrefillQFrags {
  uint32_t f[C::kQInRegs ? C::kRowTiles : 1][C::kQInRegs ? C::kHeadDim / 16 : 1][4];

  // Loaded once, at the first tile (the Q tile has landed with it).
  __device__ __forceinline__ void load(uint32_t s_q_addr, int warp_row) {
    if constexpr (C::kQInRegs) {
      const int lane = thread_lane();
#pragma unroll
      for (int rt = 0; rt < C::kRowTiles; ++rt)
#pragma unroll
        for (int kk = 0; kk < C::kHeadDim / 16; ++kk)
          tile::ldmatrix_x4(f[rt][kk], s_q_addr + detail::tile_offset<C, C::kBlockM>(warp_row + rt * 16 + lane % 16, 2 * kk + lane / 16));
    }
  }
};

// S = Q K^T for the tile at s_k_addr.
template <typename C>
__device__ __forceinline__ void qk_tile(PrefillScores<C>& r_s, const PrefillQFrags<C>& qf, uint32_t s_q_addr,
                                        uint32_t s_k_addr, int warp_row) {
  using T = typename C::T;
  constexpr int kD = C::kHeadDim;
  constexpr int kN = C::kBlockN;
  constexpr int kR = C::kRowTiles;
  const int warp = thread_warp();
  const int lane = thread_lane();
  if constexpr (C::kWgmma) {
    // The warpgroup's 64 rows of Q against the whole K tile, 16 columns of the head dim a step.
    float(&r_sw)[kN / 2] = reinterpret_cast<float(&)[kN / 2]>(r_s[0]);
    wgmma::qk_ss<T, kN, kD>(r_sw, s_q_addr + (warp / 4) * 64 * 128, C::kBlockM * 128, s_k_addr);
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
          for (int i = 0; i < 4; ++i) a[rt][i] = qf.f[rt][kk][i];
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
}

// O += P V for the tile at s_v_addr, P being r_s after the softmax: the S accumulator of two n8
// blocks is exactly the A fragment of one k16 step.
template <typename C>
__device__ __forceinline__ void pv_tile(PrefillO<C>& r_o, PrefillScores<C>& r_s, uint32_t s_v_addr) {
  using T = typename C::T;
  constexpr int kD = C::kHeadDim;
  constexpr int kN = C::kBlockN;
  constexpr int kR = C::kRowTiles;
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
    wgmma::pv_rs<T, kN, kD>(r_ow, a, s_v_addr);
    wgmma::wait_all();
    wgmma::fence_regs(r_ow);
  } else {
    const int lane = thread_lane();
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
}

}  // namespace attnkit::planned::prefill_detail
