// The decode kernel's softmax between S^T = K Q^T and O^T += V^T P^T of each tile: the online
// update per query head (column max over the warp's keys, rescale of l and O) and P^T as the B
// operand of the second product. The scale, soft-cap and mask of the scores stay in the kernel
// body (decode_kernel.cuh): as a function of their own they compiled to six more branches. The
// products are decode_mainloop.cuh.
#pragma once

#include <cmath>

#include "backends/planned/kernels/decode_mainloop.cuh"

namespace attnkit::planned::decode_detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Max over the 8 lanes of a column (the keys g of one head pair).
__device__ __forceinline__ float col_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 8));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 16));
}

// The item's custom mask row (one byte a key), or null where it has none.
__device__ __forceinline__ const uint8_t* item_mask(const DecodeParams& p, const DecodeWorkItem& it) {
  if (p.custom_mask_indptr == nullptr) return nullptr;
  const int64_t lo = p.custom_mask_indptr[it.request_idx], hi = p.custom_mask_indptr[it.request_idx + 1];
  return hi > lo ? p.custom_mask + lo : nullptr;
}

// The online update per head: the new max over the warp's keys, l and O rescaled by
// exp2(m_old - m_new); m_use is the base the tile's exponentials take.
template <typename C>
__device__ __forceinline__ void online_update(DecodeHeadStat& r_m, DecodeHeadStat& r_l, DecodeO<C>& r_o,
                                              const float (&head_max)[2], float (&m_use)[2]) {
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float m_new = fmaxf(r_m[j], col_max(head_max[j]));
    // -inf - -inf is NaN: a head with nothing visible yet keeps base 0, so its P and alpha are 0.
    m_use[j] = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = tile::fast_exp2(r_m[j] - m_use[j]);
    r_m[j] = m_new;
    r_l[j] *= alpha;
#pragma unroll
    for (int n = 0; n < C::kHeadDim / 16; ++n) {
      r_o[n][j] *= alpha;
      r_o[n][2 + j] *= alpha;
    }
  }
}

// P = exp2(S - m) into l, and P^T as the B operand of O^T += V^T P^T: this lane holds
// P[key][heads 2t, 2t+1]; the B fragment wants P[keys 2t, 2t+1][head g]: one 8x8 transpose a half
// of the keys.
template <typename T>
__device__ __forceinline__ void probs(DecodeHeadStat& r_l, const float (&sc)[4], const float (&m_use)[2],
                                      uint32_t& b_p0, uint32_t& b_p1) {
  float pr[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    pr[c] = tile::fast_exp2(sc[c] - m_use[c % 2]);
    r_l[c % 2] += pr[c];
  }
  b_p0 = transpose8x8(tile::pack2<T>(pr[0], pr[1]));
  b_p1 = transpose8x8(tile::pack2<T>(pr[2], pr[3]));
}

}  // namespace attnkit::planned::decode_detail
