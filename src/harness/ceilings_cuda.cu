// The GPU ceilings of ceilings.h: a streaming read kernel for bandwidth, cuBLAS for the matrix rate.
// Both time with CUDA events after a warm-up and report the median.
#include "harness/ceilings.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/check.h"
#include "cuda/memory.h"
#include "cuda/timer.h"

namespace attnkit::harness {

namespace {

constexpr int kWarmup = 3;
constexpr int kRepeats = 15;
constexpr int kReadThreads = 512;
constexpr int kLoadsInFlight = 4;   // independent 16-byte loads a thread issues before using them
constexpr size_t kMinReadBytes = size_t{2} << 30;  // 2 GiB: ~33x the H200's 60 MB L2
constexpr int kGemmDim = 8192;

#define ATTNKIT_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                               \
    cublasStatus_t attnkit_st_ = (expr);                                                             \
    if (attnkit_st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      throw Error(detail::concat("cuBLAS error in ", #expr, ": ", cublasGetStatusString(attnkit_st_))); \
  } while (0)

// A per-element hash, so neither buffer is zeros or a repeating pattern the memory system favours.
__device__ __forceinline__ uint32_t hash32(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return static_cast<uint32_t>(x >> 32);
}

__global__ void fill_words_kernel(uint32_t* g_x, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    g_x[i] = hash32(i);
  }
}

// Values uniform in [-1, 1): the operands of the GEMM.
__global__ void fill_bf16_kernel(__nv_bfloat16* g_x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x) {
    g_x[i] = __float2bfloat16_rn(static_cast<float>(hash32(i + seed)) * 0x1p-31f - 1.0f);
  }
}

// Reads every 16-byte word once; the XOR of what it read is written only in the impossible case
// that it equals `never`, so the compiler must keep every load and the kernel writes nothing.
__global__ void __launch_bounds__(kReadThreads) read_kernel(const uint4* __restrict__ g_x, size_t n, uint32_t never,
                                                            uint32_t* g_sink) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  uint32_t acc = 0;
  for (; i + (kLoadsInFlight - 1) * stride < n; i += kLoadsInFlight * stride) {
    uint4 r_v[kLoadsInFlight];  // [kLoadsInFlight]
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) r_v[u] = __ldcs(g_x + i + u * stride);
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) acc ^= r_v[u].x ^ r_v[u].y ^ r_v[u].z ^ r_v[u].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(g_x + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == never) *g_sink = acc;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Owned device memory for the probes (freed on every path, also when a check throws).
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : ptr(cuda::device_malloc(n)) {}
  ~DeviceBuffer() { cuda::device_free(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr;
};

}  // namespace

double measure_gpu_read_bandwidth() {
  const cuda::DeviceInfo info = cuda::device_info();
  const size_t bytes = std::max(kMinReadBytes, info.l2_bytes * 32) / sizeof(uint4) * sizeof(uint4);
  const size_t n = bytes / sizeof(uint4);
  DeviceBuffer data(bytes);
  DeviceBuffer sink(sizeof(uint32_t));
  fill_words_kernel<<<info.num_sms * 8, 256>>>(static_cast<uint32_t*>(data.ptr), bytes / sizeof(uint32_t));
  ATTNKIT_CUDA_CHECK_LAUNCH("fill_words_kernel [", bytes, " bytes]");
  const int blocks = info.num_sms * 4;  // 4 x 512 threads fill an SM's 2048 thread slots
  cuda::EventTimer timer;
  std::vector<double> ms;
  for (int r = 0; r < kWarmup + kRepeats; ++r) {
    timer.start();
    read_kernel<<<blocks, kReadThreads>>>(static_cast<const uint4*>(data.ptr), n, 0x5EEDu, static_cast<uint32_t*>(sink.ptr));
    ATTNKIT_CUDA_CHECK_LAUNCH("read_kernel [", bytes, " bytes]");
    const double t = timer.stop_ms();
    if (r >= kWarmup) ms.push_back(t);
  }
  return static_cast<double>(bytes) / (median(ms) * 1e-3);
}

double measure_gpu_bf16_matrix_rate() {
  const cuda::DeviceInfo info = cuda::device_info();
  const size_t elems = size_t{kGemmDim} * kGemmDim;
  DeviceBuffer a(elems * sizeof(__nv_bfloat16));
  DeviceBuffer b(elems * sizeof(__nv_bfloat16));
  DeviceBuffer c(elems * sizeof(__nv_bfloat16));
  fill_bf16_kernel<<<info.num_sms * 8, 256>>>(static_cast<__nv_bfloat16*>(a.ptr), elems, 0);
  ATTNKIT_CUDA_CHECK_LAUNCH("fill_bf16_kernel A");
  // B from other hash values than A, so the product is not A times itself.
  fill_bf16_kernel<<<info.num_sms * 8, 256>>>(static_cast<__nv_bfloat16*>(b.ptr), elems, elems);
  ATTNKIT_CUDA_CHECK_LAUNCH("fill_bf16_kernel B");
  cublasHandle_t handle = nullptr;
  ATTNKIT_CUBLAS_CHECK(cublasCreate(&handle));
  const float alpha = 1.0f;
  const float beta = 0.0f;
  std::vector<double> ms;
  try {
    cuda::EventTimer timer;
    for (int r = 0; r < kWarmup + kRepeats; ++r) {
      timer.start();
      ATTNKIT_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, kGemmDim, kGemmDim, kGemmDim, &alpha, a.ptr,
                                        CUDA_R_16BF, kGemmDim, b.ptr, CUDA_R_16BF, kGemmDim, &beta, c.ptr, CUDA_R_16BF,
                                        kGemmDim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      const double t = timer.stop_ms();
      if (r >= kWarmup) ms.push_back(t);
    }
  } catch (...) {
    cublasDestroy(handle);
    throw;
  }
  cublasDestroy(handle);
  const double flops = 2.0 * kGemmDim * double{kGemmDim} * kGemmDim;
  return flops / (median(ms) * 1e-3);
}

}  // namespace attnkit::harness
