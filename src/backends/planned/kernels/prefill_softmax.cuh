// The extend kernel's softmax, between S = Q K^T and O += P V of each tile: the logit scale and
// soft-cap, the bounds of the tiles that need no mask, and the online update (row max, rescale of
// O and l, P = exp2(S - m)). The mask itself stays in the kernel body (prefill_kernel.cuh), where
// the request's custom-mask flag lives: passed into a function, that flag was carried as a byte
// rather than a predicate, and the mask's branches and registers came out differently. The
// products are prefill_mainloop.cuh.
#pragma once

#include "backends/planned/kernels/prefill_mainloop.cuh"

namespace attnkit::planned::prefill_detail {

template <typename C>
struct PrefillSoftmax {
  static constexpr int kN = C::kBlockN;
  static constexpr int kR = C::kRowTiles;
  // KV positions visible to every row of the tile: tiles inside need no mask.
  int tile_unmasked_hi, tile_unmasked_lo;
  const uint8_t* g_mask;
  bool soft_cap;
  float logit_scale, cap_log2;
  float exp_scale;  // raw S -> log2 units, inside the exp2

  __device__ __forceinline__ PrefillSoftmax(const PrefillParams& p, const PrefillItem& it, bool custom) {
    tile_unmasked_hi = custom || !p.causal ? it.kv_hi : min(it.kv_hi, it.pos_min + 1);
    tile_unmasked_lo = p.window_left >= 0 ? max(it.kv_lo, it.pos_max - p.window_left) : it.kv_lo;
    g_mask = custom ? p.custom_mask + p.custom_mask_indptr[it.req] : nullptr;
    soft_cap = p.logits_soft_cap > 0.0f;
    // Logits in log2 units: exp(x) = exp2(x * log2 e). e4m3 keys: q.(k * k_scale) = k_scale (q.k).
    const float qk_scale = p.sm_scale * (C::kFp8 ? p.k_scale : 1.0f);
    logit_scale = soft_cap ? qk_scale / p.logits_soft_cap : qk_scale * detail::kLog2e;
    cap_log2 = p.logits_soft_cap * detail::kLog2e;
    exp_scale = soft_cap ? 1.0f : logit_scale;
  }

  // Soft-cap turns S into log2-unit logits here; without it the scale is folded into the exp2 of
  // update (one FFMA an element).
  __device__ __forceinline__ void cap(PrefillScores<C>& r_s) const {
    if (soft_cap) {
#pragma unroll
      for (int rt = 0; rt < kR; ++rt)
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) r_s[rt][nb][e] = cap_log2 * tanhf(r_s[rt][nb][e] * logit_scale);
    }
  }

  // A row's max (log2 units) moves only where the tile's exceeds it by more than kMaxSlack: P is
  // then at most 2^8 = 256 (P is rounded to 16 bits, which hold it; O and l are f32), and O is
  // rescaled only on tiles where some row of the warp moved, not on every tile. O / l and the LSE
  // (m + log2 l) do not depend on which m the sums were taken against.
  static constexpr float kMaxSlack = 8.0f;

  // Online softmax: rescale O and l by exp2(m_old - m_new), P = exp2(S - m) in place of S.
  __device__ __forceinline__ void update(PrefillScores<C>& r_s, PrefillO<C>& r_o, PrefillRowStat<C>& r_m,
                                         PrefillRowStat<C>& r_l) const {
    constexpr float kNegInf = -INFINITY;
    float corr[kR][2];
    bool moved = false;
#pragma unroll
    for (int rt = 0; rt < kR; ++rt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = kNegInf;
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb) mx = fmaxf(mx, fmaxf(r_s[rt][nb][2 * h], r_s[rt][nb][2 * h + 1]));
        mx = tile::quad_max(mx);
        // Raw scores in, log2 units out (exp_scale > 0, so the max commutes with it). m = -inf:
        // any visible score moves it (-inf + slack).
        const bool move = mx * exp_scale > r_m[rt][h] + kMaxSlack;
        moved |= move;
        const float m_new = move ? mx * exp_scale : r_m[rt][h];
        // A row with nothing visible yet keeps m = -inf; subtract 0 so exp2 gives 0, not NaN.
        const float base = m_new == kNegInf ? 0.0f : m_new;
        corr[rt][h] = move ? tile::fast_exp2(r_m[rt][h] - base) : 1.0f;
        r_m[rt][h] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nb = 0; nb < kN / 8; ++nb) {
          r_s[rt][nb][2 * h] = tile::fast_exp2(fmaf(r_s[rt][nb][2 * h], exp_scale, -base));
          r_s[rt][nb][2 * h + 1] = tile::fast_exp2(fmaf(r_s[rt][nb][2 * h + 1], exp_scale, -base));
          sum += r_s[rt][nb][2 * h] + r_s[rt][nb][2 * h + 1];
        }
        r_l[rt][h] = r_l[rt][h] * corr[rt][h] + sum;
      }
    }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int rt = 0; rt < kR; ++rt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int nb = 0; nb < C::kHeadDim / 8; ++nb) {
            r_o[rt][nb][2 * h] *= corr[rt][h];
            r_o[rt][nb][2 * h + 1] *= corr[rt][h];
          }
    }
  }
};

}  // namespace attnkit::planned::prefill_detail
