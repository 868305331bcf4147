// AVX512-BF16 products for the heads kernel (see decode_bf16.h), and the softmax of a tile between
// them with an exp as precise as P's rounding to bf16 needs; the tile loop is decode.cc's.
// S = q K^T: each lane of a vdpbf16ps sums two neighbouring elements of q_h and K_k, so q and the
// cache's rows are read as they are stored and a score is one horizontal sum. O += P V: two keys'
// V rows are interleaved in registers (unpack, within 128-bit blocks) and P comes as a bf16 pair a key
// pair, so o accumulates in the unpack's column order, put back once per unit.
#include "backends/cpu/kernels/decode_bf16.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/cpu/kernels/bf16_intrinsics.h"

namespace attnkit::cpu {

namespace {

constexpr int kPairLanes = 16;   // fp32 lanes of a vector, each holding one bf16 pair's products
constexpr int kVecElems = 32;    // bf16 elements of a vector
constexpr int kQkKeys = 4;       // keys a QK block holds: 4 keys x up to 4 heads accumulators

// The lane sums of x0..x3 in one 128-bit vector: interleaves pair the four inside each 128-bit
// block (3 adds, 6 shuffles for all four), then the blocks fold.
ATTNKIT_BF16_TARGET inline __m128 sum4(__m512 x0, __m512 x1, __m512 x2, __m512 x3) {
  // Per block: [x0_0 + x0_2, x1_0 + x1_2, x0_1 + x0_3, x1_1 + x1_3], and the same for x2, x3.
  const __m512 r01 = _mm512_add_ps(_mm512_unpacklo_ps(x0, x1), _mm512_unpackhi_ps(x0, x1));
  const __m512 r23 = _mm512_add_ps(_mm512_unpacklo_ps(x2, x3), _mm512_unpackhi_ps(x2, x3));
  // Per block: [x0, x1, x2, x3] partial sums.
  const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(r01), _mm512_castps_pd(r23));
  const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(r01), _mm512_castps_pd(r23));
  const __m512 v = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Always inlined: GCC finds a function whose only effects are prefetches pure and drops its calls.
ATTNKIT_BF16_TARGET __attribute__((always_inline)) inline void prefetch_rows(const Bf16Prefetch& pf, int begin,
                                                                             int end) {
  for (int k = begin; k < end && k < pf.n; ++k) {
    if (pf.k_len > 0) {
      const char* kr = reinterpret_cast<const char*>(pf.keys[k]);
      for (int off = 0; off < 2 * pf.k_len; off += 64) __builtin_prefetch(kr + off, 0, 1);
    }
    if (pf.v_len > 0) {
      const char* vr = reinterpret_cast<const char*>(pf.vals[k]);
      for (int off = 0; off < 2 * pf.v_len; off += 64) __builtin_prefetch(vr + off, 0, 1);
    }
  }
}

// s[h][k0 + t] = scale * q_h . K_{k0 + t} for t < kTok, h < kHeads; K_k at keys[k] + off. The
// 64-byte lines from pf are asked for pf_per_step at each step over dk, not in one burst.
template <int kTok, int kHeads>
ATTNKIT_BF16_TARGET __attribute__((always_inline)) inline void qk_block(const uint16_t* q, int dk,
                                                                        const uint16_t* const* keys, int k0,
                                                                        float scale, float* s, int s_stride,
                                                                        int64_t off, const char* pf = nullptr,
                                                                        int pf_per_step = 0) {
  __m512 acc[kTok][kHeads];
  for (int t = 0; t < kTok; ++t)
    for (int h = 0; h < kHeads; ++h) acc[t][h] = _mm512_setzero_ps();
  for (int e = 0; e < dk; e += kVecElems) {
    for (int i = 0; i < pf_per_step; ++i) __builtin_prefetch(pf + i * 64, 0, 1);
    pf += pf_per_step * 64;
    __m512bh kv[kTok];
    for (int t = 0; t < kTok; ++t) kv[t] = as_bh(_mm512_loadu_si512(keys[k0 + t] + off + e));
    for (int h = 0; h < kHeads; ++h) {
      const __m512bh qv = as_bh(_mm512_loadu_si512(q + int64_t{h} * dk + e));
      for (int t = 0; t < kTok; ++t) acc[t][h] = _mm512_dpbf16_ps(acc[t][h], qv, kv[t]);
    }
  }
  if constexpr (kTok == 4) {
    const __m128 vscale = _mm_set1_ps(scale);
    for (int h = 0; h < kHeads; ++h)
      _mm_storeu_ps(s + h * s_stride + k0, _mm_mul_ps(sum4(acc[0][h], acc[1][h], acc[2][h], acc[3][h]), vscale));
  } else {
    for (int t = 0; t < kTok; ++t)
      for (int h = 0; h < kHeads; ++h) s[h * s_stride + k0 + t] = _mm512_reduce_add_ps(acc[t][h]) * scale;
  }
}

// Every query head against kTok keys from k0, KV head by KV head (bf16_tokens_qk), in blocks of
// kHeads query heads and a block of the group's rest. Inlined down to qk_block: called through a
// switch a block, it ran 17% slower from L3 than the head-by-head loop it replaced. kGroup > 0: the
// group size, known when compiled (its loops and the rest's switch go away; with the size read at
// run time S took 27 cycles a key and KV head from L2, 22.5 with it known, on one Zen 4 core).
template <int kTok, int kHeads, int kGroup>
ATTNKIT_BF16_TARGET __attribute__((always_inline)) inline void qk_tokens_block(
    const uint16_t* q, int num_kv_heads, int run_time_group, int dk, const uint16_t* const* keys, int k0, float scale,
    float* s, int s_stride, const Bf16Prefetch& ahead, const Bf16Prefetch& vals) {
  const int group = kGroup > 0 ? kGroup : run_time_group;
  // ahead's key rows and vals' value rows [k0, k0 + kTok) as one run of 64-byte lines each, a KV
  // head's share of both asked for at a time.
  const int k_row_lines = 2 * ahead.k_len / 64, v_row_lines = 2 * vals.v_len / 64;
  const int k_lines = (k0 + kTok <= ahead.n ? kTok : std::max(ahead.n - k0, 0)) * k_row_lines;
  const int v_lines = (k0 + kTok <= vals.n ? kTok : std::max(vals.n - k0, 0)) * v_row_lines;
  // Lines [begin, end) of rows[k0], rows[k0 + 1], ... of row_lines lines each (one division a share).
  auto ask = [](const uint16_t* const* rows, int row_lines, int begin, int end) {
    if (begin >= end) return;
    int row = begin / row_lines, line = begin - row * row_lines;
    for (int l = begin; l < end; ++l) {
      __builtin_prefetch(reinterpret_cast<const char*>(rows[row]) + line * 64, 0, 1);
      if (++line == row_lines) line = 0, ++row;
    }
  };
  // The usual case: the kTok key rows are consecutive slots of one page, one run of bytes, asked
  // for without the carry above (which took about 15% of the decode's time from cache), and a few
  // lines at each step of the products: in one burst a KV head, 1.4% slower from DRAM in paired
  // runs; all of a block's lines at once, 23-31% slower.
  const char* k_run = nullptr;
  if (k_lines == kTok * k_row_lines && k_lines > 0 &&
      ahead.keys[k0 + kTok - 1] == ahead.keys[k0] + int64_t{kTok - 1} * ahead.k_len)
    k_run = reinterpret_cast<const char*>(ahead.keys[k0]);
  const int steps = dk / kVecElems;  // qk_block's steps over dk
  for (int j = 0; j < num_kv_heads; ++j) {
    const int k_begin = j * k_lines / num_kv_heads, k_end = (j + 1) * k_lines / num_kv_heads;
    // The run's share goes to the KV head's first block of query heads (kHeads <= group, so there
    // is one), spread evenly over its steps where it divides, else asked for here.
    const bool spread = k_run != nullptr && (k_end - k_begin) % steps == 0;
    if (k_run == nullptr) {
      ask(ahead.keys + k0, k_row_lines, k_begin, k_end);
    } else if (!spread) {
      for (int l = k_begin; l < k_end; ++l) __builtin_prefetch(k_run + l * 64, 0, 1);
    }
    ask(vals.vals + k0, v_row_lines, j * v_lines / num_kv_heads, (j + 1) * v_lines / num_kv_heads);
    const int64_t off = int64_t{j} * dk;
    int h = 0;
    for (; h + kHeads <= group; h += kHeads) {
      const int head = j * group + h;
      const bool first = h == 0 && spread;
      qk_block<kTok, kHeads>(q + int64_t{head} * dk, dk, keys, k0, scale, s + head * s_stride, s_stride, off,
                             first ? k_run + int64_t{k_begin} * 64 : nullptr, first ? (k_end - k_begin) / steps : 0);
    }
    const int head = j * group + h;  // the group's last heads, fewer than kHeads
    const uint16_t* qh = q + int64_t{head} * dk;
    float* sh = s + head * s_stride;
    switch (group - h) {
      case 3: qk_block<kTok, 3>(qh, dk, keys, k0, scale, sh, s_stride, off); break;
      case 2: qk_block<kTok, 2>(qh, dk, keys, k0, scale, sh, s_stride, off); break;
      case 1: qk_block<kTok, 1>(qh, dk, keys, k0, scale, sh, s_stride, off); break;
      default: break;
    }
  }
}

template <int kHeads, int kGroup>
ATTNKIT_BF16_TARGET void qk_tokens(const uint16_t* q, int num_kv_heads, int group, int dk, const uint16_t* const* keys,
                                   int nt, float scale, float* s, int s_stride, const Bf16Prefetch& keys_ahead,
                                   const Bf16Prefetch& vals) {
  int k = 0;
  for (; k + kQkKeys <= nt; k += kQkKeys) {
    qk_tokens_block<kQkKeys, kHeads, kGroup>(q, num_kv_heads, group, dk, keys, k, scale, s, s_stride, keys_ahead, vals);
  }
  prefetch_rows(keys_ahead, k, nt);
  prefetch_rows(vals, k, nt);
  const Bf16Prefetch none{};
  for (; k < nt; ++k) qk_tokens_block<1, kHeads, kGroup>(q, num_kv_heads, group, dk, keys, k, scale, s, s_stride, none, none);
}

// One key pair (b: the second key's row, or null for a zero row: its weight is 0 but garbage values
// could be NaN) into kHeads x kVecs accumulators of the columns [c0, c0 + 16 kVecs).
template <int kHeads, int kVecs>
ATTNKIT_BF16_TARGET inline void pv_pair(const uint16_t* a, const uint16_t* b, const uint32_t* pairs, int pair_stride,
                                        int c0, __m512 (&acc)[kHeads][kVecs]) {
  __m512bh vv[kVecs];
  for (int c = 0; c < kVecs / 2; ++c) {
    const __m512i va = _mm512_loadu_si512(a + c0 + c * kVecElems);
    const __m512i vb = b != nullptr ? _mm512_loadu_si512(b + c0 + c * kVecElems) : _mm512_setzero_si512();
    vv[2 * c] = as_bh(_mm512_unpacklo_epi16(va, vb));
    vv[2 * c + 1] = as_bh(_mm512_unpackhi_epi16(va, vb));
  }
  for (int h = 0; h < kHeads; ++h) {
    const __m512bh pb = as_bh(_mm512_set1_epi32(static_cast<int>(pairs[h * pair_stride])));
    for (int c = 0; c < kVecs; ++c) acc[h][c] = _mm512_dpbf16_ps(acc[h][c], pb, vv[c]);
  }
}

// Lines [line_begin, line_end) of pf's V row k (if it has one).
ATTNKIT_BF16_TARGET __attribute__((always_inline)) inline void prefetch_v_lines(const Bf16Prefetch& pf, int k,
                                                                                int line_begin, int line_end) {
  if (k >= pf.n) return;
  const char* row = reinterpret_cast<const char*>(pf.vals[k]);
  for (int l = line_begin; l < line_end; ++l) __builtin_prefetch(row + l * 64, 0, 1);
}

// O's columns [c0, c0 + 16 kVecs) for kHeads heads over the tile's keys; pf's V rows' lines
// [line_begin, line_end) asked for along the way, a key pair's two rows at a time.
template <int kHeads, int kVecs>
ATTNKIT_BF16_TARGET inline void pv_block(const Bf16Prefetch& pf, int line_begin, int line_end,
                                         const uint32_t* pairs, int pair_stride, const uint16_t* const* vals, int nt,
                                         int dv, int c0, const float* alpha, float* o) {
  __m512 acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h) {
    const __m512 a = _mm512_set1_ps(alpha[h]);
    for (int c = 0; c < kVecs; ++c)
      acc[h][c] = _mm512_mul_ps(_mm512_loadu_ps(o + int64_t{h} * dv + c0 + c * kPairLanes), a);
  }
  int k = 0;
  for (; k + 1 < nt; k += 2) {
    prefetch_v_lines(pf, k, line_begin, line_end);
    prefetch_v_lines(pf, k + 1, line_begin, line_end);
    pv_pair<kHeads, kVecs>(vals[k], vals[k + 1], pairs + k / 2, pair_stride, c0, acc);
  }
  for (int r = k; r < pf.n; ++r) prefetch_v_lines(pf, r, line_begin, line_end);  // past nt: the next tile's
  if (k < nt) pv_pair<kHeads, kVecs>(vals[k], nullptr, pairs + k / 2, pair_stride, c0, acc);
  for (int h = 0; h < kHeads; ++h)
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(o + int64_t{h} * dv + c0 + c * kPairLanes, acc[h][c]);
}

// Columns in blocks of 64 (4 heads x 4 vectors of accumulators, 4 of V pairs), then 32. Each block
// asks for its share of pf's rows' lines: all of them in the first block instead ran 7-8% slower
// from DRAM (paired runs, 8 x 4096 and 1 x 32768): the prefetches went out in bursts.
template <int kHeads>
ATTNKIT_BF16_TARGET inline void pv_heads(const Bf16Prefetch& pf, const uint32_t* pairs, int pair_stride,
                                         const uint16_t* const* vals, int nt, int dv, const float* alpha, float* o) {
  const int blocks = dv / (4 * kPairLanes) + dv % (4 * kPairLanes) / kVecElems;
  const int lines = 2 * pf.v_len / 64;  // V rows only (bf16_heads_pv)
  int c = 0, b = 0;
  for (; c + 4 * kPairLanes <= dv; c += 4 * kPairLanes, ++b)
    pv_block<kHeads, 4>(pf, lines * b / blocks, lines * (b + 1) / blocks, pairs, pair_stride, vals, nt, dv, c, alpha, o);
  for (; c < dv; c += kVecElems, ++b)
    pv_block<kHeads, 2>(pf, lines * b / blocks, lines * (b + 1) / blocks, pairs, pair_stride, vals, nt, dv, c, alpha, o);
}

}  // namespace

ATTNKIT_BF16_TARGET void bf16_tokens_qk(const uint16_t* q, int num_kv_heads, int group, int dk,
                                        const uint16_t* const* keys, int nt, float scale, float* s, int s_stride,
                                        const Bf16Prefetch& keys_ahead, const Bf16Prefetch& vals) {
  // Blocks of 4 heads and the rest (up to 3): a key load serves up to 4 query heads. The usual
  // groups of 4 and 8 compiled for their size.
  if (group == 4) return qk_tokens<4, 4>(q, num_kv_heads, group, dk, keys, nt, scale, s, s_stride, keys_ahead, vals);
  if (group == 8) return qk_tokens<4, 8>(q, num_kv_heads, group, dk, keys, nt, scale, s, s_stride, keys_ahead, vals);
  if (group > 4) return qk_tokens<4, 0>(q, num_kv_heads, group, dk, keys, nt, scale, s, s_stride, keys_ahead, vals);
  if (group == 3) return qk_tokens<3, 3>(q, num_kv_heads, group, dk, keys, nt, scale, s, s_stride, keys_ahead, vals);
  if (group == 2) return qk_tokens<2, 2>(q, num_kv_heads, group, dk, keys, nt, scale, s, s_stride, keys_ahead, vals);
  qk_tokens<1, 1>(q, num_kv_heads, group, dk, keys, nt, scale, s, s_stride, keys_ahead, vals);
}

ATTNKIT_BF16_TARGET void bf16_heads_pv(const Bf16Prefetch& pf, const float* p, int p_stride, int heads,
                                       const uint16_t* const* vals, int nt, int dv, const float* alpha, float* o,
                                       uint32_t* pairs) {
  // pairs[h][i] = P[h][2i], P[h][2i + 1] in bf16: cvtne2ps puts its second operand in the low
  // half, so 32 consecutive weights come out as 16 consecutive key pairs.
  const int pair_stride = (nt + kVecElems - 1) / kVecElems * kVecElems / 2;
  for (int h = 0; h < heads; ++h) {
    for (int k = 0; k < nt; k += kVecElems) {
      const float* ph = p + int64_t{h} * p_stride + k;
      const __m512bh packed = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(ph + kPairLanes), _mm512_loadu_ps(ph));
      _mm512_storeu_si512(pairs + h * pair_stride + k / 2, reinterpret_cast<__m512i>(packed));
    }
  }
  switch (heads) {
    case 4: pv_heads<4>(pf, pairs, pair_stride, vals, nt, dv, alpha, o); break;
    case 3: pv_heads<3>(pf, pairs, pair_stride, vals, nt, dv, alpha, o); break;
    case 2: pv_heads<2>(pf, pairs, pair_stride, vals, nt, dv, alpha, o); break;
    default: pv_heads<1>(pf, pairs, pair_stride, vals, nt, dv, alpha, o); break;
  }
}

namespace {

// exp(x) for x <= 0 or -inf, to about 5e-6 relative (P is rounded to bf16, 2^-9, before P V):
// 2^(x log2 e) split into n + f, |f| <= 1/2, 2^f by its degree-5 Taylor polynomial and 2^n by
// vscalefps. Clamped at -160 first: scalef(1, -160) is exactly 0, so -inf gives 0 (a fully masked
// row's l stays 0) and no NaN comes from -inf - -inf.
ATTNKIT_BF16_TARGET inline __m512 exp_nonpositive(__m512 x) {
  const __m512 t = _mm512_max_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _mm512_set1_ps(-160.0f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.3333558e-3f);  // ln2^5 / 120
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));  // ln2^4 / 24
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));  // ln2^3 / 6
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));  // ln2^2 / 2
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));  // ln2
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

ATTNKIT_BF16_TARGET float bf16_softmax_tile(float* s, int n, float* m, float* l) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int k = 0; k < n; k += kPairLanes) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(s + k));
  const float m_new = std::max(*m, _mm512_reduce_max_ps(vmax));
  const bool none = m_new == -std::numeric_limits<float>::infinity();
  const __m512 vm = _mm512_set1_ps(none ? 0.0f : m_new);  // all -inf: exp(-inf - 0) = 0
  __m512 sum = _mm512_setzero_ps();
  for (int k = 0; k < n; k += kPairLanes) {
    const __m512 pk = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + k), vm));
    _mm512_storeu_ps(s + k, pk);
    sum = _mm512_add_ps(sum, pk);
  }
  const float alpha = *m == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(*m - (none ? 0.0f : m_new));
  *m = m_new;
  *l = *l * alpha + _mm512_reduce_add_ps(sum);
  return alpha;
}

// unpacklo_epi16 puts columns 8j..8j+3 of a 32-column group in lanes 4j..4j+3 of the first
// vector, unpackhi columns 8j+4..8j+7 in the same lanes of the second: two two-source permutes
// put each group back.
ATTNKIT_BF16_TARGET void bf16_pairs_to_natural(float* o, int dv) {
  alignas(64) static constexpr int32_t kFirst[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
  alignas(64) static constexpr int32_t kSecond[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
  const __m512i first = _mm512_load_si512(kFirst);
  const __m512i second = _mm512_load_si512(kSecond);
  for (int g = 0; g < dv; g += kVecElems) {
    const __m512 lo = _mm512_loadu_ps(o + g);
    const __m512 hi = _mm512_loadu_ps(o + g + kPairLanes);
    _mm512_storeu_ps(o + g, _mm512_permutex2var_ps(lo, first, hi));
    _mm512_storeu_ps(o + g + kPairLanes, _mm512_permutex2var_ps(lo, second, hi));
  }
}

}  // namespace attnkit::cpu
