// Device building blocks of the extend kernel: the swizzled shared-memory tile layout, cp.async,
// ldmatrix and mma.sync m16n8k16 wrappers, and element conversions. The mainloop is prefill_kernel.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "cuda/row_math.cuh"

namespace attnkit::planned::tile {

// A shared tile row is head_dim elements of 2 bytes, cut in 16-byte chunks. Chunk c of row r is
// stored at chunk c ^ (r % 8): the 8 rows one ldmatrix reads (same logical chunk) then fall into 8
// different 16-byte bank groups, and so do the 8 chunks consecutive threads cp.async into one row.
template <int kHeadDim>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
  constexpr int kRowBytes = kHeadDim * 2;
  return static_cast<uint32_t>(row * kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// The extend kernel's layout, which wgmma reads with 128-byte swizzling (and ldmatrix as well): a
// tile of kRows rows is stored as column blocks of 64 elements (128-byte rows, kRows * 128 bytes a
// block), with the same XOR of the chunk by row % 8 inside each 1024-byte group of 8 rows.
template <int kRows>
__device__ __forceinline__ uint32_t swizzle_blocked(int row, int chunk) {
  return static_cast<uint32_t>(((chunk >> 3) * kRows + row) * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without registers; `valid` false writes zeros (rows past the end must
// be finite: a masked score's P is 0, and 0 * NaN from stale memory would still be NaN).
__device__ __forceinline__ void cp_async_16(uint32_t s_dst, const void* g_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s_dst), "l"(g_src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}
// Completes one arrival on the mbarrier at s_bar once every cp.async this thread issued before it
// has landed (the arrival is one of those the barrier was initialised to expect).
__device__ __forceinline__ void cp_async_arrive(uint32_t s_bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(s_bar) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 address the rows of matrix i, r[i] receives it.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t s_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s_addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t s_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s_addr));
}

// C[16x8] += A[16x16] B[16x8], fp32 accumulate. Fragments: g = lane / 4, t = lane % 4;
// a = {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}, b = {(k 2t.., n g), (k 2t+8.., n g)},
// c = {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

using ::attnkit::cuda::pack2;  // two floats -> one operand register of two T (cuda/row_math.cuh)

// Two e4m3 bytes (low byte first) -> two T, exactly: every e4m3 value is a bf16 and an f16 value.
template <typename T>
__device__ __forceinline__ uint32_t e4m3x2_to(uint16_t bits) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits), __NV_E4M3);
  if constexpr (std::is_same_v<T, __half>) {
    return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
  } else {
    const __half2 hh = *reinterpret_cast<const __half2*>(&h);
    const float2 f = __half22float2(hh);
    return pack2<__nv_bfloat16>(f.x, f.y);
  }
}

// Two elements of the other 16-bit type (low first) -> two T, rounded to nearest. An f16 value
// always fits bf16's range; a bf16 value past f16's (65504) becomes infinite.
template <typename T, typename TKv>
__device__ __forceinline__ uint32_t convert2(uint32_t bits) {
  static_assert(sizeof(TKv) == 2 && !std::is_same_v<T, TKv>, "a conversion between the two 16-bit types");
  float2 f;
  if constexpr (std::is_same_v<TKv, __half>) {
    f = __half22float2(*reinterpret_cast<const __half2*>(&bits));
  } else {
    f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  }
  return pack2<T>(f.x, f.y);
}

// 16 cached bytes -> T, as 32-bit words: 8 for e4m3 (exactly), 4 for the other 16-bit type
// (rounded once, like a cast). Both kernels convert a cache of another type this way.
template <typename T, typename TKv>
__device__ __forceinline__ void convert16(const uint4& raw, uint32_t* out) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(TKv) == 1) {
      out[2 * i] = e4m3x2_to<T>(static_cast<uint16_t>(w[i] & 0xffffu));
      out[2 * i + 1] = e4m3x2_to<T>(static_cast<uint16_t>(w[i] >> 16));
    } else {
      out[i] = convert2<T, TKv>(w[i]);
    }
  }
}

// Row maxima and sums over a quad's 4 lanes, and exp2 (cuda/row_math.cuh).
using ::attnkit::cuda::fast_exp2;
using ::attnkit::cuda::quad_max;
using ::attnkit::cuda::quad_sum;

}  // namespace attnkit::planned::tile
