// The split-KV merge: one CTA a merge item (grid-stride over a device count), one thread four
// output elements, every partial of the item read once per element.
#include "backends/planned/kernels/merge.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backends/planned/kernels/prefill_tile.cuh"
#include "cuda/check.h"

namespace attnkit::planned {

namespace {

constexpr int kMergeThreads = 128;

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) decode_merge_kernel(const __grid_constant__ DecodeParams p) {
  const int num_merges = *p.num_merges;
  const int d4 = p.head_dim / 4;
  for (int m = blockIdx.x; m < num_merges; m += gridDim.x) {
    const DecodeMergeItem it = p.merges[m];
    for (int idx = threadIdx.x; idx < it.num_rows * d4; idx += blockDim.x) {
      const int r = idx / d4, d = (idx % d4) * 4;
      float lse_max = -INFINITY;
      for (int i = 0; i < it.num_partials; ++i) {
        lse_max = fmaxf(lse_max, p.partial_lse[int64_t{it.partial_begin + i} * kDecodeRows + r]);
      }
      // All chunks empty: lse_max is -inf and every weight 0, so the row is zeros, never NaN.
      const float base = lse_max == -INFINITY ? 0.0f : lse_max;
      float l_sum = 0.0f;
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      for (int i = 0; i < it.num_partials; ++i) {
        const int64_t row = int64_t{it.partial_begin + i} * kDecodeRows + r;
        const float w = __expf(p.partial_lse[row] - base);
        const float4 oi = *reinterpret_cast<const float4*>(p.partial_o + row * p.head_dim + d);
        l_sum += w;
        o.x += w * oi.x; o.y += w * oi.y; o.z += w * oi.z; o.w += w * oi.w;
      }
      const int head = it.qo_head_begin + r;
      if (p.sinks != nullptr && lse_max != -INFINITY) l_sum += __expf(p.sinks[head] - base);
      const float inv = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
      T* g_out = static_cast<T*>(p.out) + (int64_t{it.token_idx} * p.num_qo_heads + head) * p.head_dim + d;
      *reinterpret_cast<uint2*>(g_out) =
          make_uint2(tile::pack2<T>(o.x * inv, o.y * inv), tile::pack2<T>(o.z * inv, o.w * inv));
    }
  }
}

}  // namespace

void launch_decode_merge(const DecodeParams& p, cudaStream_t stream) {
  if (p.merges == nullptr || p.num_ctas == 0) return;
  switch (p.q_dtype) {
    case DType::bf16: decode_merge_kernel<__nv_bfloat16><<<p.num_ctas, kMergeThreads, 0, stream>>>(p); break;
    case DType::f16: decode_merge_kernel<__half><<<p.num_ctas, kMergeThreads, 0, stream>>>(p); break;
    default: throw Error(detail::concat("planned merge: q dtype must be bf16 or f16, got ", dtype_name(p.q_dtype)));
  }
  ATTNKIT_CUDA_CHECK_LAUNCH("planned decode_merge_kernel [", p.num_ctas, " CTAs, ", p.num_qo_heads,
                            " q heads, head_dim ", p.head_dim, ", ", dtype_name(p.q_dtype), "]");
}

}  // namespace attnkit::planned
