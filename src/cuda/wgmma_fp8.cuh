// The e4m3 wgmma products of the fp8 attention path (sm_90a), f32 accumulators, d = 128:
// S = Q K^T with both operands K-major in shared memory (rows of 128 e4m3 bytes, 128-byte swizzle),
// and O += P V with P from registers and V transposed in shared memory (fp8 wgmma reads only
// K-major operands, so V^T: a row per head-dim column, the tokens along it).
//
// P's registers come straight from S's accumulator, without moving values between threads, by
// permuting the tokens of V^T instead. A thread's accumulator holds, of each 32 columns (tokens)
// of rows r and r + 8, the columns {0, 1, 8, 9, 16, 17, 24, 25} + 2 (lane % 4); the e4m3 A fragment
// of a k32 step wants positions {0, 1, 2, 3, 16, 17, 18, 19} + 4 (lane % 4) (PTX ISA: wgmma
// register fragments, m64nNk32, as mma.m16n8k32's A). So position p of V^T holds token
// vt_token(p): the thread's four tokens of each 16 sit at its four positions.
#pragma once

#include <cstdint>

#include "cuda/wgmma_ops.cuh"

namespace attnkit::cuda::wgmma {

// The token (0..127, within a K/V tile) at position p of a V^T row.
__host__ __device__ constexpr int vt_token(int p) {
  const int i = p & 3;           // byte of the thread's register
  const int quad = (p & 15) >> 2;  // lane % 4
  return (p & ~15) + 8 * (i >> 1) + 2 * quad + (i & 1);
}

__device__ __forceinline__ void wgmma_ss_e4m3_n128(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
               ATTNKIT_WGMMA_ACC64_REGS ", %64, %65, p, 1, 1;\n}\n"
               : ATTNKIT_WGMMA_ACC64 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
  __trap();
#endif
}

__device__ __forceinline__ void wgmma_rs_e4m3_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\nwgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
               ATTNKIT_WGMMA_ACC64_REGS ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
               : ATTNKIT_WGMMA_ACC64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));
#else
  __trap();
#endif
}

// S [64 x 128] = Q K^T of one warpgroup, issued and committed: Q's 64 rows and the K tile's 128,
// 128 bytes each; four k32 steps of 32 bytes.
__device__ __forceinline__ void qk_ss_e4m3(float (&s)[64], uint32_t s_q, uint32_t s_k) {
  fence();
  const uint64_t q0 = make_desc(s_q, 16, 1024), k0 = make_desc(s_k, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_ss_e4m3_n128(s, advance_desc(q0, kk * 32), advance_desc(k0, kk * 32), kk > 0);
  commit();
}

// O [64 x 128] += P V of one warpgroup, issued and committed: P as four k32 A fragments (pack_p_e4m3),
// V^T at s_vt (128 head-dim rows of 128 token positions).
__device__ __forceinline__ void pv_rs_e4m3(float (&o)[64], const uint32_t (&p)[4][4], uint32_t s_vt) {
  fence_regs(o);
  fence();
  const uint64_t vt0 = make_desc(s_vt, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_rs_e4m3_n128(o, p[kk], advance_desc(vt0, kk * 32));
  commit();
}

// Four floats to four e4m3 bytes (round to nearest even, saturating to +-448), b0 in the low byte.
__device__ __forceinline__ uint32_t e4m3x4(float b0, float b1, float b2, float b3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\ncvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
  return r;
}

// S's accumulator [64 x 128] (m64n128: element nb * 4 + e is row r + 8 (e / 2), column 8 nb +
// 2 (lane % 4) + e % 2) times `factor`, as e4m3 A fragments of four k32 steps over V^T's positions.
__device__ __forceinline__ void pack_p_e4m3(const float (&s)[64], float factor, uint32_t (&p)[4][4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const float* a = s + 16 * kk;  // the accumulator's column blocks 4 kk .. 4 kk + 3
    p[kk][0] = e4m3x4(a[0] * factor, a[1] * factor, a[4] * factor, a[5] * factor);      // row r, tokens 0-15
    p[kk][1] = e4m3x4(a[2] * factor, a[3] * factor, a[6] * factor, a[7] * factor);      // row r + 8
    p[kk][2] = e4m3x4(a[8] * factor, a[9] * factor, a[12] * factor, a[13] * factor);    // row r, tokens 16-31
    p[kk][3] = e4m3x4(a[10] * factor, a[11] * factor, a[14] * factor, a[15] * factor);  // row r + 8
  }
}

// A tile of 128 rows of 128 bytes, 128-byte swizzled (as the TMA lands it): byte b of row r.
__host__ __device__ constexpr uint32_t swizzled_byte(int r, int b) {
  return static_cast<uint32_t>(r * 128 + (((b >> 4) ^ (r & 7)) << 4) + (b & 15));
}

// V [128 tokens x 128 e4m3] at s_v (swizzled rows) into V^T at s_vt (a row a head-dim column, position
// p holding token vt_token(p), swizzled), by `threads` threads from `tid` (a multiple of 32 threads);
// tokens from `valid` on are written as zeros (stale bytes may be NaN codes, and 0 x NaN is NaN even
// where P is 0). A unit is 4 positions x 16 columns: four 16-byte reads (a token's 16 columns each),
// 4 x 4 byte transposes, sixteen 32-bit writes (a column's 4 positions each). The lanes of a warp
// take consecutive positions: the writes meet no bank conflict, the reads at most two lanes a bank.
__device__ __forceinline__ void transpose_v_e4m3(const unsigned char* s_v, unsigned char* s_vt, int tid, int threads,
                                                 int valid) {
  for (int u = tid; u < 32 * 8; u += threads) {
    const int pb = u % 32;  // positions 4 pb .. 4 pb + 3
    const int e = u / 32;   // columns 16 e .. 16 e + 15
    uint4 r[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int token = vt_token(4 * pb + i);
      r[i] = token < valid ? *reinterpret_cast<const uint4*>(s_v + swizzled_byte(token, 16 * e)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // columns 16 e + 4 q .. + 3: word q of each token's 16 bytes
      const uint32_t w[4] = {(&r[0].x)[q], (&r[1].x)[q], (&r[2].x)[q], (&r[3].x)[q]};
      const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
      const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
      const uint32_t cols[4] = {__byte_perm(lo01, lo23, 0x5410), __byte_perm(lo01, lo23, 0x7632),
                                __byte_perm(hi01, hi23, 0x5410), __byte_perm(hi01, hi23, 0x7632)};
#pragma unroll
      for (int k = 0; k < 4; ++k)
        *reinterpret_cast<uint32_t*>(s_vt + swizzled_byte(16 * e + 4 * q + k, 4 * pb)) = cols[k];
    }
  }
}

}  // namespace attnkit::cuda::wgmma
