// The `hopper` extend kernel's epilogue: each consumer thread's two rows normalised (the layer's
// sinks join the denominator) and written in q's type, with the natural-log LSE where asked.
#pragma once

#include "backends/hopper/kernels/mainloop.cuh"

namespace attnkit::hopper {

template <typename C>
__device__ __forceinline__ void write_out(const ExtendParams& p, const Tile& t, const Consumer<C>& c,
                                          const Softmax<C>& sx) {
  using T = typename C::T;
  constexpr int kD = C::kHeadDim;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = c.first_row() + 8 * h;
    const float l = ::attnkit::cuda::quad_sum(sx.l[h]);
    const float m = sx.m_for_sums(h);  // fp8 products: l and O carry kPFactor
    if (r >= t.rows_here) continue;
    const int packed = t.row0 + r;
    const int head = t.kv_head * t.group + packed % t.group;
    const int64_t row = int64_t{t.qo_start + packed / t.group} * p.num_qo_heads + head;
    float total = l;
    if (p.sinks != nullptr && m != -INFINITY) total += exp2f(p.sinks[head] * kLog2e - m);
    // A fully masked row: zeros, never 0/0. fp8 products: O carries V's scale (P's factor, in both
    // O and the sum, cancels).
    const float inv = total > 0.0f ? (C::kFp8 ? p.v_scale : 1.0f) / total : 0.0f;
    T* g_o = static_cast<T*>(p.out) + row * kD + 2 * (c.lane % 4);
#pragma unroll
    for (int nb = 0; nb < kD / 8; ++nb)
      *reinterpret_cast<uint32_t*>(g_o + nb * 8) =
          ::attnkit::cuda::pack2<T>(c.o[nb * 4 + 2 * h] * inv, c.o[nb * 4 + 2 * h + 1] * inv);
    if (p.lse != nullptr && c.lane % 4 == 0) p.lse[row] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
  }
}

}  // namespace attnkit::hopper
