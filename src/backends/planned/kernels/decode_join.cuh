// The split-KV join, inside the decode kernel: the CTA that writes a split's last partial to finish
// combines all of them into the output (or, for long splits, a group's into a group partial, then
// the groups' into the output). Each partial's CTA counts itself on the merge item's counter
// (release and acquire at GPU scope); the one that sees the count complete reads the partials back
// from L2 (they are never in its L1) and resets the counter for the next launch or graph replay. No
// merge kernel and no launch of one: the joins of large batches overlap other CTAs' streaming.
// A wide split whose CTAs can all wait (DecodeMergeItem::all_wait, in a cooperative launch) is
// instead joined by all of them at once, each a slice (join_all_wait).
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

// A load of `counter` with acquire semantics at GPU scope.
__device__ __forceinline__ int load_acquire(const int32_t* counter) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(counter) : "memory");
  return v;
}

// (m, l, o) of one row's column quad over partials: o and l relative to exp(m); an empty state
// has m = -inf, l = 0, o = 0.
struct JoinState {
  float m, l;
  float4 o;
  // Folds in a state (b_m, b_l, b_o) the same way; either may be empty.
  __device__ __forceinline__ void fold(float b_m, float b_l, float4 b_o) {
    if (b_m == -INFINITY) return;
    const float m_new = fmaxf(m, b_m);
    const float a = m == -INFINITY ? 0.0f : __expf(m - m_new), b = __expf(b_m - m_new);
    l = l * a + b_l * b;
    o.x = o.x * a + b * b_o.x; o.y = o.y * a + b * b_o.y;
    o.z = o.z * a + b * b_o.z; o.w = o.w * a + b * b_o.w;
    m = m_new;
  }
};

// The output row quad of a finished join: normalised, the sink in the denominator only, zeros
// where every chunk was empty; and the row's LSE where asked (sinks excluded).
template <typename T, int kHeadDim>
__device__ __forceinline__ void write_joined(const DecodeParams& p, const DecodeMergeItem& m, int r, int d,
                                             JoinState st) {
  const int head = m.qo_head_begin + r;
  if (p.lse != nullptr && d == 0) {
    p.lse[int64_t{m.token_idx} * p.num_qo_heads + head] = st.l > 0.0f ? st.m + __logf(st.l) : -INFINITY;
  }
  if (p.sinks != nullptr && st.m != -INFINITY) st.l += __expf(p.sinks[head] - st.m);
  const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
  T* g_out = static_cast<T*>(p.out) + (int64_t{m.token_idx} * p.num_qo_heads + head) * kHeadDim + d;
  *reinterpret_cast<uint2*>(g_out) =
      make_uint2(tile::pack2<T>(st.o.x * inv, st.o.y * inv), tile::pack2<T>(st.o.z * inv, st.o.w * inv));
}

// An all_wait merge in a cooperative launch. Every chunk's CTA counts its partial (the counter's
// low 16 bits); the CTAs of chunks 0 .. n-2 (each at its last item, so waiting holds up nothing of
// theirs) wait for all n, then chunk k's CTA joins slice k of the rows' column quads, a warp a quad
// with the partials spread over its lanes, and counts itself done (the high bits); the last to be
// done resets the counter. After the last partial lands this costs one poll and one round of
// loads, spread over n - 1 SMs, where two levels cost a count and a round each on one SM.
template <typename T, int kHeadDim, int kThreads, typename OnJoin>
__device__ __forceinline__ void join_all_wait(const DecodeParams& p, const DecodeWorkItem& it,
                                              const DecodeMergeItem& m, int32_t* counter, OnJoin on_join) {
  const int k = it.partial_idx - m.partial_begin;
  const int joiners = m.num_partials - 1;
  if (threadIdx.x == 0) {
    const int arrived = (count_acq_rel(counter) & 0xffff) + 1;
    if (k < joiners && arrived < m.num_partials) {
      while ((load_acquire(counter) & 0xffff) < m.num_partials) __nanosleep(32);
    }
  }
  __syncthreads();  // thread 0's acquire, then this barrier, order the loads below after every partial
  if (k >= joiners) return;
  on_join();
  constexpr int kQuads = kHeadDim / 4;
  const int quads = m.num_rows * kQuads;
  const int lane = threadIdx.x % 32;
  const int slice_end = (k + 1) * quads / joiners;
  for (int idx = k * quads / joiners + threadIdx.x / 32; idx < slice_end; idx += kThreads / 32) {
    const int r = idx / kQuads, d = (idx % kQuads) * 4;
    JoinState st{-INFINITY, 0.0f, make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
    for (int j0 = lane; j0 < m.num_partials; j0 += 64) {  // two loads in flight a lane
      const int j1 = min(j0 + 32, m.num_partials - 1);
      const int64_t row0 = int64_t{m.partial_begin + j0} * kDecodeRows + r;
      const int64_t row1 = int64_t{m.partial_begin + j1} * kDecodeRows + r;
      const float lse0 = __ldcg(p.partial_lse + row0);
      const float lse1 = j0 + 32 < m.num_partials ? __ldcg(p.partial_lse + row1) : -INFINITY;
      const float4 o0 = __ldcg(reinterpret_cast<const float4*>(p.partial_o + row0 * kHeadDim + d));
      const float4 o1 = __ldcg(reinterpret_cast<const float4*>(p.partial_o + row1 * kHeadDim + d));
      st.fold(lse0, 1.0f, o0);
      st.fold(lse1, 1.0f, o1);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {  // a fixed butterfly: the same sums in every run
      const float b_m = __shfl_xor_sync(0xffffffffu, st.m, off), b_l = __shfl_xor_sync(0xffffffffu, st.l, off);
      float4 b_o;
      b_o.x = __shfl_xor_sync(0xffffffffu, st.o.x, off); b_o.y = __shfl_xor_sync(0xffffffffu, st.o.y, off);
      b_o.z = __shfl_xor_sync(0xffffffffu, st.o.z, off); b_o.w = __shfl_xor_sync(0xffffffffu, st.o.w, off);
      st.fold(b_m, b_l, b_o);
    }
    if (lane == 0) write_joined<T, kHeadDim>(p, m, r, d, st);
  }
  __syncthreads();  // the slice is written before this CTA counts itself done
  if (threadIdx.x == 0 && (atomicAdd(counter, 1 << 16) >> 16) == joiners - 1) atomicExch(counter, 0);
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
    if (m.all_wait != 0 && p.cooperative != 0) {
      join_all_wait<T, kHeadDim, kThreads>(p, it, m, counters + merge_idx, on_join);
      return;
    }
    if (threadIdx.x == 0) *s_flag = count_acq_rel(counters + merge_idx) == m.num_partials - 1;
    __syncthreads();
    if (*s_flag == 0) return;
    on_join();

    constexpr int kQuads = kHeadDim / 4;
    for (int idx = threadIdx.x; idx < m.num_rows * kQuads; idx += kThreads) {
      const int r = idx / kQuads, d = (idx % kQuads) * 4;
      // Online over the partials, kJoinFanIn loads in flight at a time (the planner keeps most
      // merges to one such round). Every L2 round trip here is exposed at the kernel's end, about
      // 1.3 us each on the H200 while the other CTAs stream.
      JoinState st{-INFINITY, 0.0f, make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
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
        for (int u = 0; u < kJoinFanIn; ++u) st.fold(lse[u], 1.0f, part[u]);
      };
      round(0);  // straight-line: the usual merge is one round, and a loop around it cost 1.6%
      for (int k0 = kJoinFanIn; k0 < m.num_partials; k0 += kJoinFanIn) round(k0);
      if (m.next_merge >= 0) {  // a group partial: normalised, with its log-sum-exp
        const float inv = st.l > 0.0f ? 1.0f / st.l : 0.0f;
        const int64_t row = int64_t{m.out_partial} * kDecodeRows + r;
        *reinterpret_cast<float4*>(p.partial_o + row * kHeadDim + d) =
            make_float4(st.o.x * inv, st.o.y * inv, st.o.z * inv, st.o.w * inv);
        if (d == 0) p.partial_lse[row] = st.l > 0.0f ? st.m + __logf(st.l) : -INFINITY;
        continue;
      }
      write_joined<T, kHeadDim>(p, m, r, d, st);
    }
    if (threadIdx.x == 0) counters[merge_idx] = 0;
    merge_idx = m.next_merge;
  }
}

}  // namespace attnkit::planned::decode_detail
