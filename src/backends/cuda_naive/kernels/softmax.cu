// P = softmax(S) in place over every score row of the batch, each row read from HBM and written
// back: the second pass of the naive path (scores.cu wrote S; pv.cu reads P).
#include "backends/cuda_naive/kernels/launch.h"
#include "backends/cuda_naive/kernels/load.cuh"
#include "cuda/check.h"

namespace attnkit::cuda_naive {

namespace {

constexpr int kSoftmaxThreads = 256;
constexpr int kWarps = kSoftmaxThreads / 32;

// Block-wide reduction; every thread gets the result. `s_tmp` holds one value per warp.
template <typename Op>
__device__ __forceinline__ float block_reduce(float x, float* s_tmp, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();  // s_tmp may still be read by a previous reduction
  if (lane == 0) s_tmp[warp] = x;
  __syncthreads();
  float r = s_tmp[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = op(r, s_tmp[w]);
  return r;
}

// Grid: x = score row of the batch.
__global__ void __launch_bounds__(kSoftmaxThreads) softmax_kernel(const BatchParams p) {
  __shared__ float s_tmp[kWarps];  // [kWarps]
  const Row row = find_row(p, blockIdx.x);
  const int kv_len = row.request->kv_len;
  float* g_s = row.g_scores;  // [kv_len]

  float m = -INFINITY;
  for (int t = threadIdx.x; t < kv_len; t += kSoftmaxThreads) m = fmaxf(m, g_s[t]);
  m = block_reduce(m, s_tmp, [](float a, float b) { return fmaxf(a, b); });
  if (m == -INFINITY) {
    // Nothing visible: the row averages nothing and must give zeros, never exp(-inf - -inf).
    for (int t = threadIdx.x; t < kv_len; t += kSoftmaxThreads) g_s[t] = 0.0f;
    return;
  }
  float sum = 0.0f;
  for (int t = threadIdx.x; t < kv_len; t += kSoftmaxThreads) sum += expf(g_s[t] - m);
  sum = block_reduce(sum, s_tmp, [](float a, float b) { return a + b; });
  // The sink joins the denominator only: it takes probability mass without a value row.
  if (p.sinks != nullptr) sum += expf(p.sinks[row.h] - m);
  const float inv = 1.0f / sum;
  for (int t = threadIdx.x; t < kv_len; t += kSoftmaxThreads) g_s[t] = expf(g_s[t] - m) * inv;
}

}  // namespace

void launch_softmax(const BatchParams& p) {
  if (p.num_rows == 0) return;
  softmax_kernel<<<static_cast<unsigned>(p.num_rows), kSoftmaxThreads>>>(p);
  ATTNKIT_CUDA_CHECK_LAUNCH("cuda-naive softmax_kernel [", p.num_rows, " rows]");
}

}  // namespace attnkit::cuda_naive
