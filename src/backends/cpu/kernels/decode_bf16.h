// The heads kernel's two products on bf16 pairs (AVX512-BF16 `vdpbf16ps`), for bf16 q and cache on
// CPUs that have it (bf16_dot_available()), reading q and the cache's rows in place, and the online
// softmax of a tile between them. The tile loop stays in decode.cc.
#pragma once

#include <cstdint>

namespace attnkit::cpu {

// Rows to ask for (into L2) while a tile is multiplied, a few at a time: spread over the tile, not
// in one burst (decode.cc's Prefetch says why). n = 0: none; a length of 0: none of that pool.
struct Bf16Prefetch {
  const uint16_t* const* keys = nullptr;  // [n] rows of k_len bf16
  const uint16_t* const* vals = nullptr;  // [n] rows of v_len bf16
  int n = 0;
  int k_len = 0;
  int v_len = 0;
};

// s[h * s_stride + k] = scale * q_h . K_{k, h / group} for every query head h < num_kv_heads *
// group of one token and k < nt. q: [num_kv_heads * group, dk] bf16; keys[k]: slot k's row of
// every KV head (head j's dk values at keys[k] + j * dk); dk a multiple of 32. Key blocks go in
// slot order and each block's KV heads in turn, so the cache is read in the order it is stored.
// While key block [k, k + 4) is multiplied, keys_ahead's key rows [k, k + 4) (k_len values each)
// and vals' value rows [k, k + 4) (v_len each) are asked for, a KV head's share at a time.
void bf16_tokens_qk(const uint16_t* q, int num_kv_heads, int group, int dk, const uint16_t* const* keys, int nt,
                    float scale, float* s, int s_stride, const Bf16Prefetch& keys_ahead, const Bf16Prefetch& vals);

// o_h = o_h * alpha_h + sum_k P[h][k] V_k for h < heads (1..4), k < nt, with P rounded to bf16
// (nearest even). p: [heads, p_stride] f32 with p[h][k] = 0 for nt <= k < round_up(nt, 32);
// vals[k]: key k's dv bf16 values; o: [heads, dv] in pair order (bf16_pairs_to_natural), dv a
// multiple of 32. pairs: scratch of round_up(nt, 32) / 2 words a head. pf's V rows (its keys are
// not used) are asked for two at a time, one per key pair, each block of columns its share of
// their lines.
void bf16_heads_pv(const Bf16Prefetch& pf, const float* p, int p_stride, int heads, const uint16_t* const* vals,
                   int nt, int dv, const float* alpha, float* o, uint32_t* pairs);

// The online softmax of one head over a tile, as decode.cc's softmax_head: s[0, n) (n a multiple
// of 16, -inf past the tile) becomes exp(s - m_new) with exp to about 5e-6 relative (P is rounded
// to bf16 next); m and l are updated; returns alpha = exp(m - m_new), 0 while m was -inf.
float bf16_softmax_tile(float* s, int n, float* m, float* l);

// o [dv] from the pair order bf16_heads_pv accumulates in to natural order.
void bf16_pairs_to_natural(float* o, int dv);

}  // namespace attnkit::cpu
