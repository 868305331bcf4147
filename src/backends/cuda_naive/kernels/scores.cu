// S = Q K^T * scale for one request, every head: one thread a score, written to the workspace in
// HBM (the traffic a fused kernel avoids). Masking happens here; softmax.cu and pv.cu follow.
#include "backends/cuda_naive/kernels/launch.h"
#include "backends/cuda_naive/kernels/load.cuh"
#include "cuda/check.h"

namespace attnkit::cuda_naive {

namespace {

constexpr int kScoreThreads = 128;  // keys a block; one block row covers kScoreThreads keys of one query row
constexpr int kMaxGridY = 65535;

// Grid: x = score row (head h, query j) as h * qo_len + j; y = chunk of kScoreThreads keys.
template <typename QT, typename KvT>
__global__ void __launch_bounds__(kScoreThreads) scores_kernel(const RequestParams p) {
  __shared__ float s_q[kMaxHeadDim];  // [head_dim_qk]
  const int64_t row = blockIdx.x;
  const int h = static_cast<int>(row / p.qo_len);
  const int j = static_cast<int>(row % p.qo_len);
  const int kv_head = h / (p.num_qo_heads / p.num_kv_heads);
  const QT* g_q = static_cast<const QT*>(p.q) + (int64_t{j} * p.num_qo_heads + h) * p.head_dim_qk;
  for (int d = threadIdx.x; d < p.head_dim_qk; d += blockDim.x) s_q[d] = to_float(g_q[d]);
  __syncthreads();

  const int t = blockIdx.y * kScoreThreads + threadIdx.x;
  if (t >= p.kv_len) return;
  float s = -INFINITY;
  if (is_visible(p, j, t)) {
    const KvT* g_k = static_cast<const KvT*>(p.k_pool) + (slot_of(p, t) * p.num_kv_heads + kv_head) * p.head_dim_qk;
    s = dot_row(s_q, g_k, p.head_dim_qk) * p.k_scale * p.sm_scale;
    if (p.soft_cap > 0.0f) s = p.soft_cap * tanhf(s / p.soft_cap);
  }
  p.scores[row * p.kv_len + t] = s;
}

template <typename QT, typename KvT>
void launch(const RequestParams& p) {
  const int64_t rows = int64_t{p.num_qo_heads} * p.qo_len;
  const int64_t chunks = (p.kv_len + kScoreThreads - 1) / kScoreThreads;
  // Checked once in plan(); kept here so a direct caller cannot launch a truncated grid.
  ATTNKIT_CHECK(chunks <= kMaxGridY, "cuda-naive: kv_len ", p.kv_len, " exceeds ", int64_t{kMaxGridY} * kScoreThreads);
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(chunks));
  scores_kernel<QT, KvT><<<grid, kScoreThreads>>>(p);
  ATTNKIT_CUDA_CHECK_LAUNCH("cuda-naive scores_kernel [", p.num_qo_heads, " heads x ", p.qo_len, " x ", p.kv_len,
                            "] ", dtype_name(p.q_dtype), "/", dtype_name(p.kv_dtype));
}

}  // namespace

void launch_scores(const RequestParams& p) {
  if (p.qo_len == 0 || p.kv_len == 0) return;
  dispatch_dtypes(p, [&](auto q_tag, auto kv_tag) { launch<decltype(q_tag), decltype(kv_tag)>(p); });
}

}  // namespace attnkit::cuda_naive
