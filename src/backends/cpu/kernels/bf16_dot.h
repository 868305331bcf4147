// The rows kernel's two products on bf16 pairs (AVX512-BF16 `vdpbf16ps`: two bf16 multiply-adds a
// lane into fp32, twice fp32 FMA's rate), for bf16 q and cache on CPUs that have it. The tiles'
// layout and the online softmax stay in extend.cc; this file only multiplies.
#pragma once

#include <cstdint>

namespace attnkit::cpu {

// A bf16 pair in one 32-bit word: element 2i in the low half, 2i+1 in the high half.
using Bf16Pair = uint32_t;

// Lanes of fp32 every function below assumes (AVX-512): rows and columns come in vectors of 16.
constexpr int kBf16DotLanes = 16;

// Whether this CPU runs vdpbf16ps (asked once). When false, nothing below may be called.
bool bf16_dot_available();

// S^T[t][r] = scale * sum_e K[t][e] Q[r][e] for t < nk, r < m_pad (a multiple of 16).
// qp: [dk / 2, m_pad] Q^T as pairs along e; k[t]: key t's dk bf16 values (anywhere, 4-byte aligned,
// e.g. the cache); st: [nk, m_pad]. dk even.
void bf16_qk_tile(const Bf16Pair* qp, int m_pad, int dk, const uint16_t* const* k, int nk, float scale, float* st);

// pp[t / 2][r] = P^T[t][r], P^T[t + 1][r] rounded to bf16 (nearest even), for t < nk step 2 and
// r < m_pad; an odd nk's last pair has a zero high half. st: [nk, m_pad] f32.
void bf16_pack_p(const float* st, int m_pad, int nk, Bf16Pair* pp);

// vp[t / 2][c] = V[t][c], V[t + 1][c] for c < dv (a multiple of 32); an odd nk's last pair has a
// zero high half. rows[t]: key t's dv bf16 values (anywhere, e.g. the cache).
void bf16_pack_v(const uint16_t* const* rows, int nk, int dv, Bf16Pair* vp);

// O[r][c] = O[r][c] * alpha[r] + sum_t P^T[t][r] V[t][c] for r < rows (rounded up to 4, within
// m_pad), c < dv (a multiple of 64). pp, vp as packed above; o: [m_pad, o_stride].
void bf16_pv_tile(const Bf16Pair* pp, int m_pad, int rows, const Bf16Pair* vp, int dv, int nk, const float* alpha,
                  float* o, int o_stride);

}  // namespace attnkit::cpu
