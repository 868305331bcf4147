// The heads kernel's two products on bf16 pairs (AVX512-BF16 `vdpbf16ps`), for bf16 q and cache on
// CPUs that have it (bf16_dot_available()). The tile loop and the online softmax stay in decode.cc;
// this file only multiplies, reading q and the cache's rows in place.
#pragma once

#include <cstdint>

namespace attnkit::cpu {

// Rows to ask for (into L2) while the keys of one head are multiplied, a block of keys at a time:
// spread over the tile, not in one burst (decode.cc's Prefetch says why). n = 0: none.
struct Bf16Prefetch {
  const uint16_t* const* keys = nullptr;  // [n] rows of k_len bf16
  const uint16_t* const* vals = nullptr;  // [n] rows of v_len bf16
  int n = 0;
  int k_len = 0;
  int v_len = 0;
};

// s[h * s_stride + k] = scale * q_h . K_k for h < heads (1..4), k < nt. q: [heads, dk] bf16, the
// heads' own rows; keys[k]: key k's dk bf16 values (anywhere, 4-byte aligned); dk a multiple of 32.
void bf16_heads_qk(const uint16_t* q, int heads, int dk, const uint16_t* const* keys, int nt, float scale, float* s,
                   int s_stride, const Bf16Prefetch& pf);

// o_h = o_h * alpha_h + sum_k P[h][k] V_k for h < heads (1..4), k < nt, with P rounded to bf16
// (nearest even). p: [heads, p_stride] f32 with p[h][k] = 0 for nt <= k < round_up(nt, 32);
// vals[k]: key k's dv bf16 values; o: [heads, dv] in pair order (bf16_pairs_to_natural), dv a
// multiple of 32. pairs: scratch of round_up(nt, 32) / 2 words a head.
void bf16_heads_pv(const float* p, int p_stride, int heads, const uint16_t* const* vals, int nt, int dv,
                   const float* alpha, float* o, uint32_t* pairs);

// o [dv] from the pair order bf16_heads_pv accumulates in to natural order.
void bf16_pairs_to_natural(float* o, int dv);

}  // namespace attnkit::cpu
