// The split-KV merge: one CTA a (merge item, query head), grid-stride over a count read on the
// device; lane groups split the item's partials and meet in shared memory.
#include "backends/planned/kernels/merge.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "backends/planned/kernels/prefill_tile.cuh"
#include "cuda/check.h"

namespace attnkit::planned {

namespace {

// One CTA a (merge item, query head): 32 lanes of four output elements each, times kMergeGroups
// groups that take every kMergeGroups-th partial. A long request's split has tens of partials; walking them one
// thread at a time left a few SMs each waiting on one L2 round trip per partial.
constexpr int kMergeGroups = 8;
constexpr int kMergeThreads = 32 * kMergeGroups;

template <typename T>
__global__ void __launch_bounds__(kMergeThreads) decode_merge_kernel(const __grid_constant__ DecodeParams p) {
  __shared__ float s_m[kMergeGroups][32], s_l[kMergeGroups][32];
  __shared__ float4 s_o[kMergeGroups][32];
  const int num_merges = *p.num_merges;
  const int lane = threadIdx.x % 32, grp = threadIdx.x / 32;
  // Query heads a merge item holds: the group's, at most kDecodeRows (a group of more is sliced,
  // and only its last slice may hold fewer).
  const int rows_max = min(kDecodeRows, p.num_qo_heads / p.num_kv_heads);
  for (int w = blockIdx.x; w < num_merges * rows_max; w += gridDim.x) {
    const DecodeMergeItem it = p.merges[w / rows_max];
    const int r = w % rows_max;
    if (r >= it.num_rows) continue;  // uniform across the CTA
    for (int d0 = 0; d0 < p.head_dim; d0 += 128) {
      const int d = d0 + lane * 4;
      const bool active = d < p.head_dim;  // head_dim 64: half the lanes idle
      // Online over this group's partials: o and l are relative to exp(m).
      float m = -INFINITY, l = 0.0f;
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 2
      for (int i = grp; active && i < it.num_partials; i += kMergeGroups) {
        const int64_t row = int64_t{it.partial_begin + i} * kDecodeRows + r;
        const float lse = p.partial_lse[row];
        const float4 oi = *reinterpret_cast<const float4*>(p.partial_o + row * p.head_dim + d);
        if (lse == -INFINITY) continue;  // an empty chunk adds nothing (and -inf - -inf is NaN)
        const float m_new = fmaxf(m, lse);
        const float a = __expf(m - m_new), b = __expf(lse - m_new);
        l = l * a + b;
        o.x = o.x * a + b * oi.x; o.y = o.y * a + b * oi.y; o.z = o.z * a + b * oi.z; o.w = o.w * a + b * oi.w;
        m = m_new;
      }
      s_m[grp][lane] = m;
      s_l[grp][lane] = l;
      s_o[grp][lane] = o;
      __syncthreads();
      if (grp == 0 && active) {
        float m_max = -INFINITY;
#pragma unroll
        for (int g = 0; g < kMergeGroups; ++g) m_max = fmaxf(m_max, s_m[g][lane]);
        // All chunks empty: m_max is -inf and every weight 0, so the row is zeros, never NaN.
        const float base = m_max == -INFINITY ? 0.0f : m_max;
        float l_sum = 0.0f;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int g = 0; g < kMergeGroups; ++g) {
          const float f = s_m[g][lane] == -INFINITY ? 0.0f : __expf(s_m[g][lane] - base);
          const float4 og = s_o[g][lane];
          l_sum += f * s_l[g][lane];
          acc.x += f * og.x; acc.y += f * og.y; acc.z += f * og.z; acc.w += f * og.w;
        }
        const int head = it.qo_head_begin + r;
        if (p.sinks != nullptr && m_max != -INFINITY) l_sum += __expf(p.sinks[head] - base);
        const float inv = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
        T* g_out = static_cast<T*>(p.out) + (int64_t{it.token_idx} * p.num_qo_heads + head) * p.head_dim + d;
        *reinterpret_cast<uint2*>(g_out) =
            make_uint2(tile::pack2<T>(acc.x * inv, acc.y * inv), tile::pack2<T>(acc.z * inv, acc.w * inv));
      }
      __syncthreads();  // the scratch is rewritten by the next pass
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
