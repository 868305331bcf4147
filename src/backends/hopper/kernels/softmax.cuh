// The `hopper` extend kernel's softmax, between S = Q K^T and O += P V of each K/V tile, for one
// consumer thread's two rows (r and r + 8 of its warp's 16): the logit scale and soft-cap, the
// mask (only on tiles that cross a causal, window or length boundary), and the online update (row
// max in log2 units, rescale factor, P = exp2(S - m) in place of S, running row sums).
#pragma once

#include <cmath>

#include "backends/hopper/kernels/scheduler.cuh"
#include "cuda/row_math.cuh"

namespace attnkit::hopper {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <typename C>
struct Softmax {
  static constexpr int kN = C::kBlockN;
  // A row's max (log2 units) moves only where the tile's exceeds it by more than kMaxSlack: P is
  // then at most 2^kMaxSlack = 256 (bf16 and f16 hold it, O and l in f32 too), and O is rescaled
  // on the few tiles where a max moves, instead of on every tile. O / l and the LSE (m + log2 l)
  // are the same whichever m the sums were taken against. fp8 products round P x kPFactor to e4m3,
  // whose largest value is 448: a slack of 4 with kPFactor 16 (config.cuh).
  static constexpr float kMaxSlack = C::kFp8 ? kFp8MaxSlack : 8.0f;
  int unmasked_lo, unmasked_hi;  // KV positions every row of the tile sees: tiles inside skip the mask
  int row_lo[2], row_hi[2];      // what each of this thread's rows sees
  bool soft_cap;
  float logit_scale, cap_log2, exp_scale;
  float m[2], l[2];  // running max (log2 units) and this thread's share of the row sum
  float row_scale[2] = {1.0f, 1.0f};  // fp8 products: each row's q descale x k_scale, into the logit scale

  __device__ __forceinline__ void set_row_scales(float r0, float r1) {
    row_scale[0] = r0;
    row_scale[1] = r1;
  }

  // `row` is the tile row of this thread's first row (the second is row + 8).
  __device__ __forceinline__ Softmax(const ExtendParams& p, const Tile& t, int row) {
    unmasked_hi = p.causal ? min(t.kv_len, t.pos_min + 1) : t.kv_len;
    unmasked_lo = p.window_left >= 0 ? max(0, t.pos_max - p.window_left) : 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Rows past the request's end compute a clamped copy of its last row (never written).
      const int qo_idx = min((t.row0 + row + 8 * h) / t.group, t.qo_len - 1);
      const int pos = t.prefix + qo_idx;
      row_hi[h] = p.causal ? min(t.kv_len, pos + 1) : t.kv_len;
      row_lo[h] = p.window_left >= 0 ? pos - p.window_left : 0;
      m[h] = -INFINITY;
      l[h] = 0.0f;
    }
    soft_cap = p.logits_soft_cap > 0.0f;
    logit_scale = soft_cap ? p.sm_scale / p.logits_soft_cap : p.sm_scale * kLog2e;
    cap_log2 = p.logits_soft_cap * kLog2e;
    exp_scale = soft_cap ? 1.0f : logit_scale;  // raw S -> log2 units, inside the exp2
  }

  // Soft-cap turns S into log2-unit logits; then scores the thread's rows may not see become -inf
  // (a select, after the cap, so garbage past the history's end never survives).
  __device__ __forceinline__ void cap_and_mask(float (&s)[kN / 2], int n0, int lane) const {
    if (soft_cap) {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i)
        s[i] = cap_log2 * tanhf(s[i] * (C::kFp8 ? logit_scale * row_scale[(i >> 1) & 1] : logit_scale));
    }
    if (n0 < unmasked_lo || n0 + kN > unmasked_hi) {
#pragma unroll
      for (int nb = 0; nb < kN / 8; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = n0 + nb * 8 + 2 * (lane % 4) + (e & 1);
          const int h = e >> 1;
          s[nb * 4 + e] = col >= row_lo[h] && col < row_hi[h] ? s[nb * 4 + e] : -INFINITY;
        }
    }
  }

  // The max that P and l were taken against: with fp8 products P is exp2(S - m + log2 kPFactor),
  // so l and O carry the factor, and this is what the epilogue's sinks and LSE subtract.
  __device__ __forceinline__ float m_for_sums(int h) const { return C::kFp8 ? m[h] - kLog2PFactor : m[h]; }

  // m and l updated with the tile; S becomes P; corr[h] is what O's rows must be scaled by.
  // Returns whether any of the thread's rows moved its max (corr[h] is 1 for a row that did not).
  __device__ __forceinline__ bool update(float (&s)[kN / 2], float (&corr)[2]) {
    bool moved = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float es = C::kFp8 && !soft_cap ? exp_scale * row_scale[h] : exp_scale;
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kN / 8; ++nb) mx = fmaxf(mx, fmaxf(s[nb * 4 + 2 * h], s[nb * 4 + 2 * h + 1]));
      mx = ::attnkit::cuda::quad_max(mx);
      // es > 0: the max commutes with it. m = -inf: any visible score moves it (-inf + slack).
      const bool move = mx * es > m[h] + kMaxSlack;
      moved |= move;
      const float m_new = move ? mx * es : m[h];
      // A row with nothing visible yet keeps m = -inf; subtract 0 so exp2 gives 0, not NaN.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      corr[h] = ::attnkit::cuda::fast_exp2(m[h] - base);
      m[h] = m_new;
      // fp8 products: P x kPFactor straight from the exponent (l sums it too: m_for_sums()).
      const float p_base = C::kFp8 ? base - kLog2PFactor : base;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < kN / 8; ++nb) {
        float& a = s[nb * 4 + 2 * h];
        float& b = s[nb * 4 + 2 * h + 1];
        a = ::attnkit::cuda::fast_exp2(fmaf(a, es, -p_base));
        b = ::attnkit::cuda::fast_exp2(fmaf(b, es, -p_base));
        sum += a + b;
      }
      l[h] = l[h] * corr[h] + sum;
    }
    return moved;
  }
};

}  // namespace attnkit::hopper
