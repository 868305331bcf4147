// The decode kernel's consumer mainloop, one 64-key tile a step: S^T = K Q^T (keys as the rows of m16n8k16 tiles, up to 8 query heads of a GQA group
// as their columns) and O^T += V^T P^T, and the register-carried state they accumulate into. Each
// warp owns 16 keys of a tile. The tiles come from decode_producer.cuh; the softmax between the
// two products is decode_softmax.cuh.
#pragma once

#include "backends/planned/kernels/decode_producer.cuh"

namespace attnkit::planned::decode_detail {

// Softmax state of query heads 2t and 2t + 1 (the same in every lane of a column t): the running
// max (log2 domain), this lane's part of the running denominator, and the O^T [kD, 8 heads]
// accumulator fragments.
template <typename C>
using DecodeO = float[C::kHeadDim / 16][4];
using DecodeHeadStat = float[2];
// Q^T [kD, 8 heads] as B fragments, loaded at each item's first tile.
template <typename C>
using DecodeQFrags = uint32_t[C::kHeadDim / 16][2];

template <typename C>
__device__ __forceinline__ void reset_state(DecodeHeadStat& r_m, DecodeHeadStat& r_l, DecodeO<C>& r_o) {
  r_m[0] = r_m[1] = -INFINITY;
  r_l[0] = r_l[1] = 0.0f;
#pragma unroll
  for (int n = 0; n < C::kHeadDim / 16; ++n) r_o[n][0] = r_o[n][1] = r_o[n][2] = r_o[n][3] = 0.0f;
}

// Where this warp reads its K and V rows of a tile: the stage itself, or its conversion.
struct DecodeTileView {
  uint32_t s_k, s_v;
  int row0;  // this warp's first key row in the K/V tile it reads
};

// The item's query rows (staged in shared memory by stage_q) as B fragments.
template <typename C>
__device__ __forceinline__ void load_q_frags(DecodeQFrags<C>& r_q, uint32_t s_q, int lane) {
#pragma unroll
  for (int kk = 0; kk < C::kHeadDim / 16; kk += 2) {
    uint32_t q4[4];
    tile::ldmatrix_x4(q4, s_q + tile::swizzle<C::kHeadDim>(lane % 8, kk * 2 + lane / 8));
    r_q[kk][0] = q4[0];
    r_q[kk][1] = q4[1];
    r_q[kk + 1][0] = q4[2];
    r_q[kk + 1][1] = q4[3];
  }
}

// S^T = K Q^T: [16 keys, 8 query heads], K as the A operand (m16) and Q as B (n8), so a GQA group
// of up to 8 heads wastes no more than half the mma; two accumulator chains (even and odd k steps)
// halve the dependent mma latency.
template <typename C>
__device__ __forceinline__ void qk_tile(float (&r_s)[2][4], const DecodeQFrags<C>& r_q, const DecodeTileView& v,
                                        int lane) {
  constexpr int kD = C::kHeadDim;
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t a[4];
    tile::ldmatrix_x4(a, v.s_k + tile::swizzle<kD>(v.row0 + lane % 16, kk * 2 + lane / 16));
    tile::mma_16816<typename C::T>(r_s[kk & 1], a, r_q[kk][0], r_q[kk][1]);
  }
}

// O^T += V^T P^T: V^T fragments (16 dims x 16 keys) through ldmatrix.trans, P^T the B fragments.
template <typename C>
__device__ __forceinline__ void pv_tile(DecodeO<C>& r_o, const DecodeTileView& v, uint32_t b_p0, uint32_t b_p1,
                                        int lane) {
  constexpr int kD = C::kHeadDim;
#pragma unroll
  for (int dn = 0; dn < kD / 16; ++dn) {
    uint32_t a[4];
    tile::ldmatrix_x4_trans(a, v.s_v + tile::swizzle<kD>(v.row0 + lane % 8 + 8 * (lane / 16), dn * 2 + (lane / 8) % 2));
    tile::mma_16816<typename C::T>(r_o[dn], a, b_p0, b_p1);
  }
}

}  // namespace attnkit::planned::decode_detail
