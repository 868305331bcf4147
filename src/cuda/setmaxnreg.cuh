// setmaxnreg (sm_90a): a warpgroup gives registers back to the SM's pool or takes them from it, so
// that a warp-specialised kernel's producer runs on few and its consumers on many. Every thread of
// the warpgroup executes it, with a count that is a multiple of 8 in [24, 256].
#pragma once

#include "cuda/wgmma.cuh"  // ATTNKIT_NO_SM90A

namespace attnkit::cuda {

// kRegs a thread from here on: more than it has (kRaise) or fewer.
template <bool kRaise, int kRegs>
__device__ __forceinline__ void set_registers() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
#ifndef ATTNKIT_NO_SM90A
  if constexpr (kRaise) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
  }
#endif
}
template <int kRegs>
__device__ __forceinline__ void raise_registers() { set_registers<true, kRegs>(); }
template <int kRegs>
__device__ __forceinline__ void lower_registers() { set_registers<false, kRegs>(); }

}  // namespace attnkit::cuda
