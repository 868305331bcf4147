// Hopper warpgroup MMA (wgmma, sm_90a) basics shared by the kernels that issue it: the
// shared-memory matrix descriptor of a 128-byte-swizzled tile, and the fences and waits around
// the asynchronous products. The instructions of each shape live beside the kernel that issues it.
#pragma once

#include <cstdint>

// wgmma exists only in sm_90a code; other targets compile no-ops or a trap (launchers refuse
// other GPUs first).
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTNKIT_NO_SM90A 1
#endif

namespace attnkit::cuda::wgmma {

// A descriptor of a tile of 128-byte rows whose 16-byte chunks are XOR-swizzled by row % 8, 8-row
// groups `stride_bytes` apart; `leading_bytes` is the distance between 64-element column blocks
// where the operand is MN-major (the reduction runs down the rows), unused where it is K-major.
__host__ __device__ __forceinline__ uint64_t make_desc(uint32_t s_addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  constexpr uint64_t kSwizzle128 = 1;
  return (uint64_t{(s_addr & 0x3ffff) >> 4}) | (uint64_t{(leading_bytes >> 4) & 0x3fff} << 16) |
         (uint64_t{(stride_bytes >> 4) & 0x3fff} << 32) | (kSwizzle128 << 62);
}

// The descriptor of the same tile `bytes` further on (a multiple of 16): the start address field
// (bits 0-13, in 16-byte units) never carries into the next field, since shared addresses stay under
// 2^18. One add to the low word, where make_desc would mask and shift the address again: a k-step
// loop then builds each step's descriptor from the first with one integer add.
__host__ __device__ __forceinline__ uint64_t advance_desc(uint64_t desc, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xffffffff00000000ull) | lo;
}

#ifndef ATTNKIT_NO_SM90A
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most kPending committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Shared memory written by the generic proxy (cp.async, st.shared) must be fenced before the async
// proxy (wgmma, TMA) reads or overwrites it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#else
__device__ __forceinline__ void fence() {}
__device__ __forceinline__ void commit() {}
__device__ __forceinline__ void wait_all() {}
template <int kPending>
__device__ __forceinline__ void wait() {}
__device__ __forceinline__ void fence_proxy_async() {}
#endif

// Keeps the compiler from moving accumulator reads or writes across an in-flight wgmma.
template <int kN>
__device__ __forceinline__ void fence_regs(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// The same for an operand read from registers (P of O += P V): its registers must not be reused
// until the product that reads them has been waited for.
template <int kN>
__device__ __forceinline__ void fence_regs(uint32_t (&a)[kN][4]) {
#pragma unroll
  for (int i = 0; i < kN; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[i][e])::"memory");
}

}  // namespace attnkit::cuda::wgmma
