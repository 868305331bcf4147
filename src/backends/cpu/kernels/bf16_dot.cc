// AVX512-BF16 products for the rows kernel (see bf16_dot.h); the tiling and softmax are extend.cc's.
// Not Highway: the installed Highway (1.0.3) has no target with AVX512-BF16 and widens bf16 by
// shifts in ReorderWidenMulAccumulate, so vdpbf16ps is reached only through intrinsics here, in
// functions compiled for that extension alone and called only when the CPU reports it.
#include "backends/cpu/kernels/bf16_dot.h"

#include "backends/cpu/kernels/bf16_intrinsics.h"

namespace attnkit::cpu {

bool bf16_dot_available() {
  static const bool kAvailable = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                 __builtin_cpu_supports("avx512bf16");
  return kAvailable;
}

namespace {

constexpr int kL = kBf16DotLanes;
constexpr int kQkKeys = 4;     // keys a QK micro-tile holds: 4 x 4 accumulators (6 x 4 measured no better)
constexpr int kQkRowVecs = 4;  // row vectors a QK micro-tile holds (64 rows)
constexpr int kPvRows = 4;     // rows a PV micro-tile holds
constexpr int kPvColVecs = 4;  // column vectors a PV micro-tile holds (64 columns)

template <int kTok, int kVecs>
ATTNKIT_BF16_TARGET inline void qk_micro(const Bf16Pair* qp, int m_pad, int pairs, const uint16_t* const* k, int t0,
                                         int r0, __m512 scale, float* st) {
  __m512 acc[kTok][kVecs];
  for (int t = 0; t < kTok; ++t)
    for (int v = 0; v < kVecs; ++v) acc[t][v] = _mm512_setzero_ps();
  const Bf16Pair* kr[kTok];
  for (int t = 0; t < kTok; ++t) kr[t] = reinterpret_cast<const Bf16Pair*>(k[t0 + t]);
  for (int e = 0; e < pairs; ++e) {
    __m512bh qv[kVecs];
    for (int v = 0; v < kVecs; ++v) qv[v] = as_bh(_mm512_loadu_si512(qp + int64_t{e} * m_pad + r0 + v * kL));
    for (int t = 0; t < kTok; ++t) {
      const __m512bh kk = as_bh(_mm512_set1_epi32(static_cast<int>(kr[t][e])));
      for (int v = 0; v < kVecs; ++v) acc[t][v] = _mm512_dpbf16_ps(acc[t][v], kk, qv[v]);
    }
  }
  for (int t = 0; t < kTok; ++t)
    for (int v = 0; v < kVecs; ++v)
      _mm512_storeu_ps(st + int64_t{t0 + t} * m_pad + r0 + v * kL, _mm512_mul_ps(acc[t][v], scale));
}

template <int kTok>
ATTNKIT_BF16_TARGET inline void qk_keys(const Bf16Pair* qp, int m_pad, int pairs, const uint16_t* const* k, int t0,
                                        __m512 scale, float* st) {
  int r = 0;
  for (; r + kQkRowVecs * kL <= m_pad; r += kQkRowVecs * kL)
    qk_micro<kTok, kQkRowVecs>(qp, m_pad, pairs, k, t0, r, scale, st);
  switch ((m_pad - r) / kL) {
    case 3: qk_micro<kTok, 3>(qp, m_pad, pairs, k, t0, r, scale, st); break;
    case 2: qk_micro<kTok, 2>(qp, m_pad, pairs, k, t0, r, scale, st); break;
    case 1: qk_micro<kTok, 1>(qp, m_pad, pairs, k, t0, r, scale, st); break;
    default: break;
  }
}

template <int kVecs>
ATTNKIT_BF16_TARGET inline void pv_micro(const Bf16Pair* pp, int m_pad, const Bf16Pair* vp, int dv, int pairs,
                                         const float* alpha, float* o, int o_stride, int r0, int c0) {
  __m512 acc[kPvRows][kVecs];
  for (int i = 0; i < kPvRows; ++i) {
    const __m512 a = _mm512_set1_ps(alpha[r0 + i]);
    for (int c = 0; c < kVecs; ++c)
      acc[i][c] = _mm512_mul_ps(_mm512_loadu_ps(o + int64_t{r0 + i} * o_stride + c0 + c * kL), a);
  }
  for (int e = 0; e < pairs; ++e) {
    __m512bh vv[kVecs];
    for (int c = 0; c < kVecs; ++c) vv[c] = as_bh(_mm512_loadu_si512(vp + int64_t{e} * dv + c0 + c * kL));
    const Bf16Pair* pe = pp + int64_t{e} * m_pad + r0;
    for (int i = 0; i < kPvRows; ++i) {
      const __m512bh pb = as_bh(_mm512_set1_epi32(static_cast<int>(pe[i])));
      for (int c = 0; c < kVecs; ++c) acc[i][c] = _mm512_dpbf16_ps(acc[i][c], pb, vv[c]);
    }
  }
  for (int i = 0; i < kPvRows; ++i)
    for (int c = 0; c < kVecs; ++c) _mm512_storeu_ps(o + int64_t{r0 + i} * o_stride + c0 + c * kL, acc[i][c]);
}

}  // namespace

ATTNKIT_BF16_TARGET void bf16_qk_tile(const Bf16Pair* qp, int m_pad, int dk, const uint16_t* const* k, int nk, float scale,
                                      float* st) {
  const int pairs = dk / 2;
  const __m512 vscale = _mm512_set1_ps(scale);
  int t = 0;
  for (; t + kQkKeys <= nk; t += kQkKeys) qk_keys<kQkKeys>(qp, m_pad, pairs, k, t, vscale, st);
  for (; t < nk; ++t) qk_keys<1>(qp, m_pad, pairs, k, t, vscale, st);
}

ATTNKIT_BF16_TARGET void bf16_pack_p(const float* st, int m_pad, int nk, Bf16Pair* pp) {
  // cvtne2ps gives [even 0..15, odd 0..15]; this puts each even/odd couple side by side.
  alignas(64) static constexpr uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                           8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int t = 0; t < nk; t += 2) {
    const float* even = st + int64_t{t} * m_pad;
    const float* odd = even + m_pad;
    for (int r = 0; r < m_pad; r += kL) {
      const __m512 e = _mm512_loadu_ps(even + r);
      const __m512 o = t + 1 < nk ? _mm512_loadu_ps(odd + r) : _mm512_setzero_ps();
      const __m512i packed = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(o, e));
      _mm512_storeu_si512(pp + int64_t{t / 2} * m_pad + r, _mm512_permutexvar_epi16(idx, packed));
    }
  }
}

ATTNKIT_BF16_TARGET void bf16_pack_v(const uint16_t* const* rows, int nk, int dv, Bf16Pair* vp) {
  // Element i of the first row beside element i of the second: columns 0..15, then 16..31.
  alignas(64) static constexpr uint16_t kLow[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                     24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i lo = _mm512_load_si512(kLow);
  const __m512i hi = _mm512_load_si512(kHigh);
  for (int t = 0; t < nk; t += 2) {
    const uint16_t* a = rows[t];
    const uint16_t* b = t + 1 < nk ? rows[t + 1] : nullptr;  // zero weights need zero values, not garbage
    Bf16Pair* out = vp + int64_t{t / 2} * dv;
    for (int c = 0; c < dv; c += 2 * kL) {
      const __m512i va = _mm512_loadu_si512(a + c);
      const __m512i vb = b != nullptr ? _mm512_loadu_si512(b + c) : _mm512_setzero_si512();
      _mm512_storeu_si512(out + c, _mm512_permutex2var_epi16(va, lo, vb));
      _mm512_storeu_si512(out + c + kL, _mm512_permutex2var_epi16(va, hi, vb));
    }
  }
}

ATTNKIT_BF16_TARGET void bf16_pv_tile(const Bf16Pair* pp, int m_pad, int rows, const Bf16Pair* vp, int dv, int nk,
                                      const float* alpha, float* o, int o_stride) {
  const int pairs = (nk + 1) / 2;
  for (int r = 0; r < rows; r += kPvRows) {
    for (int c = 0; c < dv; c += kPvColVecs * kL) pv_micro<kPvColVecs>(pp, m_pad, vp, dv, pairs, alpha, o, o_stride, r, c);
  }
}

}  // namespace attnkit::cpu
