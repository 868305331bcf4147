// The split-KV join, inside the decode kernel: the CTA that writes a split's last partial to finish
// combines all of them into the output (or, for long splits, a group's into a group partial, then
// the groups' into the output). Each partial's CTA counts itself on the merge item's counter
// (release and acquire at GPU scope); the one that sees the count complete reads the partials back
// from L2 (they are never in its L1) and resets the counter for the next launch or graph replay. No
// merge kernel and no launch of one: the joins of large batches overlap other CTAs' streaming.
#pragma once

#include <cmath>

#include "backends/planned/kernels/decode.h"
#include "backends/planned/kernels/prefill_tile.cuh"

namespace attnkit::planned::decode_detail {

// atomicAdd(counter, 1) with acquire and release semantics at GPU scope; returns the old value.
__device__ __forceinline__ int count_acq_rel(int32_t* counter) {
  int old;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
  return old;
}

// Called by every thread of the CTA after it wrote partial `it.partial_idx` (uniform across the
// CTA: it contains __syncthreads), `it` as load_item gave it for share `rep` of the KV heads: the
// plan's merge items are the first share's, moved here. `s_flag` is one int of shared memory. A first-level merge (a
// split joined in two levels) writes a group partial instead of the output, and its joiner then
// counts that partial on the next merge item, the same way.
// `on_join` runs (uniformly) once this CTA knows it joins, before the join's loads.
template <typename T, int kHeadDim, int kThreads, typename OnJoin>
__device__ __forceinline__ void join_if_last(const DecodeParams& p, const DecodeWorkItem& it, int rep, int* s_flag,
                                             OnJoin on_join) {
  const int rep_partials = rep * p.rep_partials;
  int32_t* const counters = p.merge_counters + rep * p.rep_merges;
  for (int merge_idx = it.merge_idx; merge_idx >= 0;) {
    // The CTA barrier orders every thread's partial writes before thread 0's count, whose release
    // makes them visible GPU-wide (cumulativity) and whose acquire, with the barrier after it,
    // orders the joiner's reads after the other CTAs' writes: one fence at GPU scope a CTA, where a
    // __threadfence in every thread, before and after, waited on each thread's own stores twice.
    __syncthreads();
    DecodeMergeItem m = p.merges[merge_idx];
    m.qo_head_begin += rep * (p.num_qo_heads / p.head_reps);
    m.partial_begin += rep_partials;
    m.out_partial += rep_partials;
    if (threadIdx.x == 0) *s_flag = count_acq_rel(counters + merge_idx) == m.num_partials - 1;
    __syncthreads();
    if (*s_flag == 0) return;
    on_join();

    constexpr int kQuads = kHeadDim / 4;
    for (int idx = threadIdx.x; idx < m.num_rows * kQuads; idx += kThreads) {
      const int r = idx / kQuads, d = (idx % kQuads) * 4;
      // Online over the partials, kJoinFanIn loads in flight at a time (the planner keeps most
      // merges to one such round): o and l are relative to exp(mx). Every L2 round trip here is
      // exposed at the kernel's end, about 1.3 us each on the H200 while the other CTAs stream.
      float mx = -INFINITY, l = 0.0f;
      float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      auto round = [&](int k0) {
        float lse[kJoinFanIn];
        float4 part[kJoinFanIn];
#pragma unroll
        for (int u = 0; u < kJoinFanIn; ++u) {
          const int k = min(k0 + u, m.num_partials - 1);
          const int64_t row = int64_t{m.partial_begin + k} * kDecodeRows + r;
          lse[u] = k0 + u < m.num_partials ? __ldcg(p.partial_lse + row) : -INFINITY;
          part[u] = __ldcg(reinterpret_cast<const float4*>(p.partial_o + row * kHeadDim + d));
        }
#pragma unroll
        for (int u = 0; u < kJoinFanIn; ++u) {
          if (lse[u] == -INFINITY) continue;  // an empty chunk adds nothing (and -inf - -inf is NaN)
          const float m_new = fmaxf(mx, lse[u]);
          const float a = __expf(mx - m_new), b = __expf(lse[u] - m_new);
          l = l * a + b;
          o.x = o.x * a + b * part[u].x; o.y = o.y * a + b * part[u].y;
          o.z = o.z * a + b * part[u].z; o.w = o.w * a + b * part[u].w;
          mx = m_new;
        }
      };
      round(0);  // straight-line: the usual merge is one round, and a loop around it cost 1.6%
      for (int k0 = kJoinFanIn; k0 < m.num_partials; k0 += kJoinFanIn) round(k0);
      const int head = m.qo_head_begin + r;
      if (m.next_merge >= 0) {  // a group partial: normalised, with its log-sum-exp
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int64_t row = int64_t{m.out_partial} * kDecodeRows + r;
        *reinterpret_cast<float4*>(p.partial_o + row * kHeadDim + d) = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
        if (d == 0) p.partial_lse[row] = l > 0.0f ? mx + __logf(l) : -INFINITY;
        continue;
      }
      // All chunks empty: the row is zeros, never NaN. The sink joins the denominator only.
      if (p.sinks != nullptr && mx != -INFINITY) l += __expf(p.sinks[head] - mx);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      T* g_out = static_cast<T*>(p.out) + (int64_t{m.token_idx} * p.num_qo_heads + head) * kHeadDim + d;
      *reinterpret_cast<uint2*>(g_out) =
          make_uint2(tile::pack2<T>(o.x * inv, o.y * inv), tile::pack2<T>(o.z * inv, o.w * inv));
    }
    if (threadIdx.x == 0) counters[merge_idx] = 0;
    merge_idx = m.next_merge;
  }
}

}  // namespace attnkit::planned::decode_detail
