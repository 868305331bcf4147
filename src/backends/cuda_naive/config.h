// What the `cuda-naive` backend runs, written once: capabilities() and the kernels' dtype dispatch
// (kernels/load.cuh) read it. Host-only: no CUDA header.
#pragma once

#include <array>

#include "attnkit/backend.h"
#include "attnkit/dtype.h"

namespace attnkit::cuda_naive {

struct Support {
  static constexpr std::array<DType, 2> q_dtypes = {DType::bf16, DType::f16};  // q, k, v and out
  static constexpr std::array<DType, 3> kv_dtypes = {DType::bf16, DType::f16, DType::e4m3};  // the cache
  // The widest head the kernels hold in registers and shared memory; any head dims up to it, qk
  // and vo may differ.
  static constexpr int max_head_dim = 256;
};
inline constexpr int kMaxHeadDim = Support::max_head_dim;

// Support as the Capabilities every caller reads.
Capabilities capabilities();

}  // namespace attnkit::cuda_naive
