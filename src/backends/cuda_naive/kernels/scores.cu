// S = Q K^T * scale for every request and head of the batch: one thread a score, written to the
// workspace in HBM (the traffic a fused kernel avoids). Masking happens here; softmax.cu and pv.cu
// follow.
#include "backends/cuda_naive/kernels/launch.h"
#include "backends/cuda_naive/kernels/load.cuh"
#include "cuda/check.h"

namespace attnkit::cuda_naive {

namespace {

constexpr int kScoreThreads = 128;  // keys a block: one block covers kScoreThreads keys of one score row
constexpr int kMaxGridY = 65535;

// Grid: x = score row of the batch; y = chunk of kScoreThreads keys (chunks past the request's
// kv_len return at once: the grid is sized for the longest request).
template <typename QT, typename KvT>
__global__ void __launch_bounds__(kScoreThreads) scores_kernel(const BatchParams p) {
  __shared__ float s_q[kMaxHeadDim];  // [head_dim_qk]
  const Row row = find_row(p, blockIdx.x);
  const RequestInfo& r = *row.request;
  const int t = blockIdx.y * kScoreThreads + threadIdx.x;
  if (blockIdx.y * kScoreThreads >= r.kv_len) return;  // the whole block: before the barrier
  const int kv_head = row.h / (p.num_qo_heads / p.num_kv_heads);
  const QT* g_q = static_cast<const QT*>(p.q) + (int64_t{r.qo_start + row.j} * p.num_qo_heads + row.h) * p.head_dim_qk;
  for (int d = threadIdx.x; d < p.head_dim_qk; d += kScoreThreads) s_q[d] = to_float(g_q[d]);
  __syncthreads();

  if (t >= r.kv_len) return;
  float s = -INFINITY;
  if (is_visible(p, r, row.j, t)) {
    const KvT* g_k = static_cast<const KvT*>(p.k_pool) + (slot_of(p, r, t) * p.num_kv_heads + kv_head) * p.head_dim_qk;
    s = dot_row(s_q, g_k, p.head_dim_qk) * p.k_scale * p.sm_scale;
    if (p.logits_soft_cap > 0.0f) s = p.logits_soft_cap * tanhf(s / p.logits_soft_cap);
  }
  row.g_scores[t] = s;
}

template <typename QT, typename KvT>
void launch(const BatchParams& p) {
  const int64_t chunks = (p.max_kv_len + kScoreThreads - 1) / kScoreThreads;
  // Checked once in plan(); kept here so a direct caller cannot launch a truncated grid.
  ATTNKIT_CHECK(chunks <= kMaxGridY, "cuda-naive: kv_len ", p.max_kv_len, " exceeds ",
                int64_t{kMaxGridY} * kScoreThreads);
  const dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>(chunks));
  scores_kernel<QT, KvT><<<grid, kScoreThreads>>>(p);
  ATTNKIT_CUDA_CHECK_LAUNCH("cuda-naive scores_kernel [", p.num_rows, " rows x ", p.max_kv_len, " keys] ",
                            dtype_name(p.q_dtype), "/", dtype_name(p.kv_dtype));
}

}  // namespace

void launch_scores(const BatchParams& p) {
  if (p.num_rows == 0 || p.max_kv_len == 0) return;
  dispatch_dtypes(p, [&](auto q_tag, auto kv_tag) { launch<decltype(q_tag), decltype(kv_tag)>(p); });
}

}  // namespace attnkit::cuda_naive
