// O = P V for the batch: one block a score row (request, head, query), its warps splitting the keys, each lane
// holding kMaxHeadDim / 32 output dims; P comes back from HBM (softmax.cu wrote it), V through the
// page table. Every head of a GQA group reads V again: nothing is shared, by design.
#include "backends/cuda_naive/kernels/launch.h"
#include "backends/cuda_naive/kernels/load.cuh"
#include "cuda/check.h"

namespace attnkit::cuda_naive {

namespace {

constexpr int kPvThreads = 256;
constexpr int kWarps = kPvThreads / 32;
constexpr int kDimsPerLane = kMaxHeadDim / 32;
static_assert(kMaxHeadDim % 32 == 0, "each lane holds a whole number of output dims");

// Grid: x = score row of the batch.
template <typename QT, typename KvT>
__global__ void __launch_bounds__(kPvThreads) pv_kernel(const BatchParams p) {
  __shared__ float s_acc[kWarps][kMaxHeadDim];  // [kWarps, head_dim_vo]
  const Row row = find_row(p, blockIdx.x);
  const RequestInfo& r = *row.request;
  const int kv_head = row.h / (p.num_qo_heads / p.num_kv_heads);
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const float* g_p = row.g_scores;  // [kv_len]

  float r_acc[kDimsPerLane] = {};  // [kDimsPerLane] dims lane, lane + 32, ...
  for (int t = warp; t < r.kv_len; t += kWarps) {
    const float w = g_p[t];
    if (w == 0.0f) continue;  // masked keys (and underflowed ones) add nothing
    const KvT* g_v = static_cast<const KvT*>(p.v_pool) + (slot_of(p, r, t) * p.num_kv_heads + kv_head) * p.head_dim_vo;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < p.head_dim_vo) r_acc[i] = fmaf(w, to_float(g_v[d]), r_acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < p.head_dim_vo) s_acc[warp][d] = r_acc[i];
  }
  __syncthreads();
  QT* g_o = static_cast<QT*>(p.out) + (int64_t{r.qo_start + row.j} * p.num_qo_heads + row.h) * p.head_dim_vo;
  for (int d = threadIdx.x; d < p.head_dim_vo; d += kPvThreads) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += s_acc[w][d];
    g_o[d] = from_float<QT>(o * p.v_scale);
  }
}

template <typename QT, typename KvT>
void launch(const BatchParams& p) {
  pv_kernel<QT, KvT><<<static_cast<unsigned>(p.num_rows), kPvThreads>>>(p);
  ATTNKIT_CUDA_CHECK_LAUNCH("cuda-naive pv_kernel [", p.num_rows, " rows x ", p.max_kv_len, " keys] ",
                            dtype_name(p.q_dtype), "/", dtype_name(p.kv_dtype));
}

}  // namespace

void launch_pv(const BatchParams& p) {
  // A request with kv_len 0 still writes its rows: zeros, like a fully masked row.
  if (p.num_rows == 0) return;
  dispatch_dtypes(p, [&](auto q_tag, auto kv_tag) { launch<decltype(q_tag), decltype(kv_tag)>(p); });
}

}  // namespace attnkit::cuda_naive
