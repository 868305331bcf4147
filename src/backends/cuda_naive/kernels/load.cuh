// Device helpers of the naive kernels: element conversions, the paged slot of a key, visibility,
// and a dot product of a shared-memory q row with one cache row. The kernels are in *.cu beside it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "attnkit/error.h"
#include "backends/cuda_naive/kernels/params.h"
#include "cuda/pick.cuh"

namespace attnkit::cuda_naive {

__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 x) { return static_cast<float>(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// One score row of the batch: its request, head and query.
struct Row {
  const RequestInfo* request;
  int h;            // query head
  int j;            // query index within the request
  float* g_scores;  // [kv_len] the row's scores
};

// Finds the request that owns score row `row`: the last whose first row, num_qo_heads * qo_start,
// is <= row (a request with no new tokens shares its qo_start with the next one, the owner).
__device__ __forceinline__ Row find_row(const BatchParams& p, int64_t row) {
  const int64_t token = row / p.num_qo_heads;  // qo_start <= token  <=>  num_qo_heads * qo_start <= row
  int lo = 0;
  int hi = p.batch_size - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.requests[mid].qo_start <= token) lo = mid; else hi = mid - 1;
  }
  const RequestInfo* r = p.requests + lo;
  const int64_t local = row - int64_t{p.num_qo_heads} * r->qo_start;
  Row out;
  out.request = r;
  out.h = static_cast<int>(local / r->qo_len);
  out.j = static_cast<int>(local % r->qo_len);
  out.g_scores = p.scores + int64_t{p.num_qo_heads} * r->pair_offset + local * r->kv_len;
  return out;
}

// Cache slot of the request's key t: page t / page_size of its page table.
__device__ __forceinline__ int64_t slot_of(const BatchParams& p, const RequestInfo& r, int t) {
  return int64_t{p.page_indices[r.page_start + t / p.page_size]} * p.page_size + t % p.page_size;
}

// Whether query j sees key t: the custom mask row where the request has one, else the causal
// rule; the window applies to both (the same rule as the reference backend).
__device__ __forceinline__ bool is_visible(const BatchParams& p, const RequestInfo& r, int j, int t) {
  const int q_pos = r.prefix_len + j;
  if (r.mask_offset >= 0) {
    if (!p.custom_mask[r.mask_offset + int64_t{j} * r.kv_len + t]) return false;
  } else if (p.causal && t > q_pos) {
    return false;
  }
  return p.window_left < 0 || t >= q_pos - p.window_left;
}

// Eight consecutive elements as floats; the caller guarantees 8-element alignment of g_x.
__device__ __forceinline__ void load8(const __nv_bfloat16* g_x, float (&r)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(g_x);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    r[2 * i] = f.x;
    r[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __half* g_x, float (&r)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(g_x);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    r[2 * i] = f.x;
    r[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const __nv_fp8_e4m3* g_x, float (&r)[8]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(g_x);
  const __nv_fp8_e4m3* e = reinterpret_cast<const __nv_fp8_e4m3*>(&raw);
#pragma unroll
  for (int i = 0; i < 8; ++i) r[i] = static_cast<float>(e[i]);
}

// sum_d s_q[d] * g_k[d]. Rows whose length is a multiple of 8 start 8-element aligned (the pool
// row stride is then a multiple of 8 elements), so they take 8-wide loads; others go one by one.
template <typename KvT>
__device__ __forceinline__ float dot_row(const float* s_q, const KvT* g_k, int dim) {
  float acc = 0.0f;
  if (dim % 8 == 0) {
    for (int d = 0; d < dim; d += 8) {
      float r_k[8];  // [8]
      load8(g_k + d, r_k);
#pragma unroll
      for (int i = 0; i < 8; ++i) acc = fmaf(s_q[d + i], r_k[i], acc);
    }
  } else {
    for (int d = 0; d < dim; ++d) acc = fmaf(s_q[d], to_float(g_k[d]), acc);
  }
  return acc;
}

// Calls fn(QT{}, KvT{}) with the element types of p's q and cache dtypes, for config.h's Support
// lists only; every launcher goes through it.
template <typename Fn>
void dispatch_dtypes(const BatchParams& p, Fn&& fn) {
  bool ran = false;
  cuda::pick<Support::q_dtypes>(p.q_dtype, [&](auto q) {
    cuda::pick<Support::kv_dtypes>(p.kv_dtype, [&](auto kv) {
      fn(typename cuda::ElementType<q.value>::type{}, typename cuda::ElementType<kv.value>::type{});
      ran = true;
    });
  });
  // Capabilities refuse other dtypes before any launch; this answers a caller that skipped them.
  ATTNKIT_CHECK(ran, "cuda-naive: no kernel for q ", dtype_name(p.q_dtype), ", cache ", dtype_name(p.kv_dtype));
}

}  // namespace attnkit::cuda_naive
