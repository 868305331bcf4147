// What the tests of the sm_90a wrappers share: a CUDA call asserted to succeed, the skip where
// there is no Hopper GPU or no sm_90a code, an owning device array, and where element i of a
// thread's m64nN f32 wgmma accumulator lies (row 16 warp + lane / 4 + 8 ((i / 2) % 2), column
// 8 (i / 4) + 2 (lane % 4) + i % 2).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/memory.h"
#include "gpu_test.h"

namespace attnkit {

#define CUDA_OK(call)                                                       \
  do {                                                                      \
    const cudaError_t attnkit_err = (call);                                 \
    ASSERT_EQ(attnkit_err, cudaSuccess) << #call << ": " << cudaGetErrorString(attnkit_err); \
  } while (0)

// The wrappers compile to no-ops without sm_90a code, and run only on Hopper.
#define SKIP_WITHOUT_HOPPER()                                                        \
  do {                                                                               \
    ATTNKIT_SKIP_WITHOUT_GPU();                                                      \
    if (!ATTNKIT_TESTS_SM90A) GTEST_SKIP() << "this build has no sm_90a code";       \
    const std::string why = cuda::why_not_hopper();                                  \
    if (!why.empty()) GTEST_SKIP() << why;                                           \
  } while (0)

template <typename T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t size = 0;
  explicit DeviceArray(size_t n) : size(n) { cudaMalloc(&ptr, n * sizeof(T)); }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    cudaMemcpy(ptr, host.data(), size * sizeof(T), cudaMemcpyHostToDevice);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> to_host() const {
    std::vector<T> host(size);
    cudaMemcpy(host.data(), ptr, size * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }
};

__host__ __device__ inline int acc_row(int lane, int warp, int i) { return 16 * warp + lane / 4 + 8 * ((i / 2) % 2); }
__host__ __device__ inline int acc_col(int lane, int i) { return 8 * (i / 4) + 2 * (lane % 4) + i % 2; }

}  // namespace attnkit
