// The decode kernel's epilogue, at each work item's last tile: the four warps' softmax states met
// in shared memory, and the item's rows written normalised: to out (with the sinks), or to its
// partial slot with the LSE for the split join (decode_join.cuh).
#pragma once

#include "backends/planned/kernels/decode_softmax.cuh"

namespace attnkit::planned::decode_detail {

// Where the warps meet: per warp and query head its max and denominator, and its O row.
struct DecodeScratch {
  float* m;  // [kWarps, kRows]
  float* l;  // [kWarps, kRows]
  float* o;  // [kWarps, kRows, kD]
};

// This warp's state into the scratch: the denominator summed over the lanes of a column.
template <typename C>
__device__ __forceinline__ void put_state(const DecodeCta& cta, const DecodeScratch& s, const DecodeHeadStat& r_m,
                                          const DecodeHeadStat& r_l, const DecodeO<C>& r_o) {
  constexpr int kD = C::kHeadDim;
  const int warp = cta.warp;
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float l = r_l[j];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    const int head = 2 * cta.t + j;
    if (cta.g == 0) {
      s.m[warp * C::kRows + head] = r_m[j];
      s.l[warp * C::kRows + head] = l;
    }
#pragma unroll
    for (int n = 0; n < kD / 16; ++n) {
      s.o[(warp * C::kRows + head) * kD + n * 16 + cta.g] = r_o[n][j];
      s.o[(warp * C::kRows + head) * kD + n * 16 + cta.g + 8] = r_o[n][2 + j];
    }
  }
}

// The warps' states joined per row and written: normalised, to the item's partial slot with its
// LSE (sinks excluded: the join adds them), or to out with the sinks in the denominator.
template <typename C>
__device__ __forceinline__ void write_item(const DecodeCta& cta, const DecodeScratch& s, const DecodeWorkItem& it) {
  using T = typename C::T;
  constexpr int kD = C::kHeadDim;
  const DecodeParams& p = cta.p;
  const int rows = min(C::kRows, cta.group - it.row_begin);
  const int head0 = it.kv_head_idx * cta.group + it.row_begin;
  for (int idx = cta.tid; idx < rows * (kD / 4); idx += C::kThreads) {
    const int r = idx / (kD / 4), d = (idx % (kD / 4)) * 4;
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) m_max = fmaxf(m_max, s.m[w * C::kRows + r]);
    const float base = m_max == -INFINITY ? 0.0f : m_max;
    float l_sum = 0.0f;
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) {
      const float f = tile::fast_exp2(s.m[w * C::kRows + r] - base);
      l_sum += f * s.l[w * C::kRows + r];
      const float4 ow = *reinterpret_cast<const float4*>(s.o + (w * C::kRows + r) * kD + d);
      o.x += f * ow.x; o.y += f * ow.y; o.z += f * ow.z; o.w += f * ow.w;
    }
    if (it.partial_idx >= 0) {
      const float inv = l_sum > 0.0f ? p.v_scale / l_sum : 0.0f;
      const int64_t row = int64_t{it.partial_idx} * C::kRows + r;
      *reinterpret_cast<float4*>(p.partial_o + row * kD + d) = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
      if (d == 0) p.partial_lse[row] = m_max == -INFINITY ? -INFINITY : (m_max + __log2f(l_sum)) * kLn2;
    } else {
      if (p.lse != nullptr && d == 0) {
        p.lse[int64_t{it.token_idx} * p.num_qo_heads + head0 + r] =
            m_max == -INFINITY ? -INFINITY : (m_max + __log2f(l_sum)) * kLn2;
      }
      // The sink joins the denominator only, and only where some key was visible.
      if (p.sinks != nullptr && m_max != -INFINITY) l_sum += tile::fast_exp2(p.sinks[head0 + r] * kLog2e - m_max);
      const float inv = l_sum > 0.0f ? p.v_scale / l_sum : 0.0f;
      T* g_out = static_cast<T*>(p.out) + (int64_t{it.token_idx} * p.num_qo_heads + head0 + r) * kD + d;
      *reinterpret_cast<uint2*>(g_out) = make_uint2(tile::pack2<T>(o.x * inv, o.y * inv), tile::pack2<T>(o.z * inv, o.w * inv));
    }
  }
}

}  // namespace attnkit::planned::decode_detail
