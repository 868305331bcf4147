// The Tensor Memory Accelerator and the mbarriers it completes on (sm_90a), shared by the kernels
// that load tiles with it: barrier init / arrive / expect-tx / wait, and box copies of a tensor map
// (tensor_map.h) into shared memory, counted in bytes on a barrier.
#pragma once

#include <cstdint>

#include "cuda/wgmma.cuh"  // ATTNKIT_NO_SM90A

namespace attnkit::cuda::tma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also expects `bytes` of copies to complete on the barrier.
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}

// One plain arrival (a consumer releasing a stage).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}

// Blocks until the barrier's phase of parity `parity` has completed. A fresh barrier counts its
// phase of parity 1 as completed, so a producer's first wait for an empty stage passes at once.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#ifndef ATTNKIT_NO_SM90A
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
#endif
}

// The same wait as one PTX loop: ptxas sees no C++ loop around it, so it can sit between the
// wgmma instructions of one group without ptxas serialising them (tests/cuda and check-sass).
__device__ __forceinline__ void mbar_wait_in_ptx(uint32_t bar, uint32_t parity) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile(
      "{\n.reg .pred p;\nwait_%=:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra wait_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#endif
}

// A box of a 2-, 3- or 4-D tensor map at the given coordinates (innermost first) into shared
// memory at dst, counted on bar.
__device__ __forceinline__ void load_2d(uint32_t dst, const void* map, int c0, int c1, uint32_t bar) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void load_3d(uint32_t dst, const void* map, int c0, int c1, int c2, uint32_t bar) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
      ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void load_4d(uint32_t dst, const void* map, int c0, int c1, int c2, int c3, uint32_t bar) {
#ifndef ATTNKIT_NO_SM90A
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
      ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#else
  __trap();
#endif
}

}  // namespace attnkit::cuda::tma
