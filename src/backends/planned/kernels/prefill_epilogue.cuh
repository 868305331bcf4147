// The extend kernel's epilogue: each accumulator row normalised (sinks join the denominator of
// unsplit items) and written, in q's type to out with its log-sum-exp where asked, or in f32 to
// the split's partial rows with their LSE for the merge.
#pragma once

#include "backends/planned/kernels/prefill_mainloop.cuh"

namespace attnkit::planned::prefill_detail {

// Split items leave sinks to the merge, which sees every split.
template <typename C>
__device__ __forceinline__ void write_out(const PrefillParams& p, const PrefillWorkItem& w, const PrefillItem& it,
                                          int kv_head, const PrefillO<C>& r_o, const PrefillRowStat<C>& r_m,
                                          const PrefillRowStat<C>& r_l, int warp_row) {
  using T = typename C::T;
  constexpr int kD = C::kHeadDim;
  const int lane = thread_lane();
  const float v_scale = C::kFp8 ? p.v_scale : 1.0f;
  const bool split = w.partial_row >= 0;
#pragma unroll
  for (int rt = 0; rt < C::kRowTiles; ++rt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_row + rt * 16 + lane / 4 + 8 * h;
      const float l = tile::quad_sum(r_l[rt][h]);
      const float m = r_m[rt][h];
      if (r >= it.rows_here) continue;
      const int packed = it.row0 + r;
      const int qo_idx = packed / it.group;
      const int head = kv_head * it.group + packed % it.group;
      const float lse = l > 0.0f ? (m + log2f(l)) * detail::kLn2 : -INFINITY;
      float total = l;
      if (!split && p.sinks != nullptr && m != -INFINITY) total += exp2f(p.sinks[head] * detail::kLog2e - m);
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
        const int64_t row = int64_t{it.qo_start + qo_idx} * p.num_qo_heads + head;
        T* g_o = static_cast<T*>(p.out) + row * kD + 2 * (lane % 4);
#pragma unroll
        for (int nb = 0; nb < kD / 8; ++nb)
          *reinterpret_cast<uint32_t*>(g_o + nb * 8) = tile::pack2<T>(r_o[rt][nb][2 * h] * inv, r_o[rt][nb][2 * h + 1] * inv);
        if (p.lse != nullptr && lane % 4 == 0) p.lse[row] = lse;
      }
    }
  }
}

}  // namespace attnkit::planned::prefill_detail
