// EventTimer: a pair of CUDA events around a region of the default stream.
#include <algorithm>
#include <cstddef>

#include "cuda/check.h"
#include "cuda/timer.h"

namespace attnkit::cuda {

EventTimer::EventTimer() {
  cudaEvent_t a, b;
  ATTNKIT_CUDA_CHECK(cudaEventCreate(&a));
  ATTNKIT_CUDA_CHECK(cudaEventCreate(&b));
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start() { ATTNKIT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_))); }

float EventTimer::stop_ms() {
  stop();
  return elapsed_ms();
}

void EventTimer::stop() { ATTNKIT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_))); }

float EventTimer::elapsed_ms() {
  ATTNKIT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0.0f;
  ATTNKIT_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return ms;
}

namespace {

__global__ void read_all(const uint4* __restrict__ src, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = src[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // keeps the loads; the buffer is zeros, so never taken
}

}  // namespace

void flush_l2() {
  static const auto buffer = [] {
    int device = 0, l2 = 0, sms = 0;
    ATTNKIT_CUDA_CHECK(cudaGetDevice(&device));
    ATTNKIT_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
    ATTNKIT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const size_t bytes = std::max<size_t>(2 * static_cast<size_t>(l2), size_t{64} << 20);
    void* p = nullptr;
    ATTNKIT_CUDA_CHECK(cudaMalloc(&p, bytes + 16));
    ATTNKIT_CUDA_CHECK(cudaMemset(p, 0, bytes + 16));
    struct Flush {
      uint4* data;
      size_t n;
      int blocks;
    };
    return Flush{static_cast<uint4*>(p), bytes / 16, sms * 4};  // kept for the process's life
  }();
  read_all<<<buffer.blocks, 256>>>(buffer.data, buffer.n, reinterpret_cast<unsigned*>(buffer.data + buffer.n));
  ATTNKIT_CUDA_CHECK_LAUNCH("flush_l2 read_all [", buffer.n * 16, " bytes]");
}

}  // namespace attnkit::cuda
