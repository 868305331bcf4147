// The wgmma instructions the attention kernels issue (sm_90a), bf16 or f16 in, f32 accumulators:
// S = Q K^T with both operands K-major in shared memory (m64n64, m64n128, m64n192), and O += P V with P from
// registers (the mma.sync A fragment of each warp's 16 rows) and V MN-major in shared memory
// (m64n64, m64n128, m64n256). Descriptors, fences and waits: cuda/wgmma.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/wgmma.cuh"

namespace attnkit::cuda::wgmma {

// The accumulator operands of an m64nN f32 wgmma: N / 2 registers a thread.
#define ATTNKIT_WGMMA_ACC32_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define ATTNKIT_WGMMA_ACC32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define ATTNKIT_WGMMA_ACC64_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define ATTNKIT_WGMMA_ACC64 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define ATTNKIT_WGMMA_ACC96_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define ATTNKIT_WGMMA_ACC96 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])

#define ATTNKIT_WGMMA_ACC128_REGS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define ATTNKIT_WGMMA_ACC128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// The wrappers of one shape differ only in their type (bf16 or f16, by T) and in the operand
// numbers that follow the N / 2 accumulators (ATTNKIT_WGMMA_ACC<N/2>), so one macro writes each.
#ifndef ATTNKIT_NO_SM90A
#define ATTNKIT_WGMMA_TYPED(ASM) \
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {  \
    ASM("bf16");                                     \
  } else {                                           \
    ASM("f16");                                      \
  }
#else
#define ATTNKIT_WGMMA_TYPED(ASM) __trap();
#endif

// wgmma_ss_n<N>: D[64 x N] (+)= A B, both K-major in shared memory; scale_d 0 overwrites D. The
// instruction text's A, B and SCALE: the operand numbers of desc_a, desc_b and scale_d.
#define ATTNKIT_WGMMA_SS(N, HALF)                                                                                \
  template <typename T>                                                                                         \
  __device__ __forceinline__ void wgmma_ss_n##N(float (&d)[HALF], uint64_t desc_a, uint64_t desc_b, int scale_d) { \
    ATTNKIT_WGMMA_TYPED(ATTNKIT_WGMMA_SS_ASM_##N)                                                               \
  }
#define ATTNKIT_WGMMA_SS_ASM(TYPE, N, HALF, A, B, SCALE)                                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." \
               TYPE "." TYPE " " ATTNKIT_WGMMA_ACC##HALF##_REGS ", " A ", " B ", p, 1, 1, 0, 0;\n}\n"            \
               : ATTNKIT_WGMMA_ACC##HALF : "l"(desc_a), "l"(desc_b), "r"(scale_d))
#define ATTNKIT_WGMMA_SS_ASM_64(TYPE) ATTNKIT_WGMMA_SS_ASM(TYPE, 64, 32, "%32", "%33", "%34")
#define ATTNKIT_WGMMA_SS_ASM_128(TYPE) ATTNKIT_WGMMA_SS_ASM(TYPE, 128, 64, "%64", "%65", "%66")
#define ATTNKIT_WGMMA_SS_ASM_192(TYPE) ATTNKIT_WGMMA_SS_ASM(TYPE, 192, 96, "%96", "%97", "%98")
ATTNKIT_WGMMA_SS(64, 32)
ATTNKIT_WGMMA_SS(128, 64)
ATTNKIT_WGMMA_SS(192, 96)

// wgmma_rs_n<N>: D[64 x N] += A B, A from registers (four a thread), B MN-major in shared memory.
#define ATTNKIT_WGMMA_RS(N, HALF)                                                                                 \
  template <typename T>                                                                                           \
  __device__ __forceinline__ void wgmma_rs_n##N(float (&d)[HALF], const uint32_t (&a)[4], uint64_t desc_b) {     \
    ATTNKIT_WGMMA_TYPED(ATTNKIT_WGMMA_RS_ASM_##N)                                                                 \
  }
#define ATTNKIT_WGMMA_RS_ASM(TYPE, N, HALF, A, B)                                                                  \
  asm volatile("{\n.reg .pred p;\nsetp.eq.u32 p, 1, 1;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." \
               TYPE " " ATTNKIT_WGMMA_ACC##HALF##_REGS ", " A ", " B ", p, 1, 1, 1;\n}\n"                        \
               : ATTNKIT_WGMMA_ACC##HALF : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
#define ATTNKIT_WGMMA_RS_ASM_64(TYPE) ATTNKIT_WGMMA_RS_ASM(TYPE, 64, 32, "{%32, %33, %34, %35}", "%36")
#define ATTNKIT_WGMMA_RS_ASM_128(TYPE) ATTNKIT_WGMMA_RS_ASM(TYPE, 128, 64, "{%64, %65, %66, %67}", "%68")
#define ATTNKIT_WGMMA_RS_ASM_256(TYPE) ATTNKIT_WGMMA_RS_ASM(TYPE, 256, 128, "{%128, %129, %130, %131}", "%132")
ATTNKIT_WGMMA_RS(64, 32)
ATTNKIT_WGMMA_RS(128, 64)
ATTNKIT_WGMMA_RS(256, 128)

// D[64 x N] (+)= A[64 x 16] B[16 x N], A and B K-major in shared memory; scale_d 0 overwrites D.
template <typename T, int kN>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(kN == 64 || kN == 128 || kN == 192, "m64n64, m64n128 and m64n192 only");
  if constexpr (kN == 64) {
    wgmma_ss_n64<T>(d, desc_a, desc_b, scale_d);
  } else if constexpr (kN == 128) {
    wgmma_ss_n128<T>(d, desc_a, desc_b, scale_d);
  } else {
    wgmma_ss_n192<T>(d, desc_a, desc_b, scale_d);
  }
}

// D[64 x N] += A[64 x 16] B[16 x N], A in registers (the mma.sync A fragment of each warp's 16 rows),
// B MN-major in shared memory.
template <typename T, int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(kN == 64 || kN == 128 || kN == 256, "m64n64, m64n128 and m64n256 only");
  if constexpr (kN == 64) {
    wgmma_rs_n64<T>(d, a, desc_b);
  } else if constexpr (kN == 128) {
    wgmma_rs_n128<T>(d, a, desc_b);
  } else {
    wgmma_rs_n256<T>(d, a, desc_b);
  }
}

// S [64 x kN] = Q K^T of one warpgroup, issued and committed (not waited for): Q's 64 rows at
// s_q, its 64-column blocks q_block_bytes apart; the K tile of kN rows at s_k, its column blocks
// kN * 128 bytes apart; kD / 16 steps of 16 head-dim columns, 32 bytes into a block each.
template <typename T, int kN, int kD>
__device__ __forceinline__ void qk_ss(float (&s)[kN / 2], uint32_t s_q, uint32_t q_block_bytes, uint32_t s_k) {
  fence();
  const uint64_t q0 = make_desc(s_q, 16, 1024), k0 = make_desc(s_k, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t desc_q = advance_desc(q0, (kk / 4) * q_block_bytes + (kk % 4) * 32);
    const uint64_t desc_k = advance_desc(k0, (kk / 4) * kN * 128 + (kk % 4) * 32);
    wgmma_ss<T, kN>(s, desc_q, desc_k, kk > 0);
  }
  commit();
}

// O [64 x kD] += P V of one warpgroup, issued and committed: P as kN / 16 A fragments, the V tile
// of kN rows at s_v MN-major (16 rows = 2048 bytes a step, the next 64 columns kN * 128 bytes on).
template <typename T, int kN, int kD>
__device__ __forceinline__ void pv_rs(float (&o)[kD / 2], const uint32_t (&p)[kN / 16][4], uint32_t s_v) {
  fence_regs(o);
  fence();
  const uint64_t v0 = make_desc(s_v, kN * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) wgmma_rs<T, kD>(o, p[kk], advance_desc(v0, kk * 16 * 128));
  commit();
}

}  // namespace attnkit::cuda::wgmma
