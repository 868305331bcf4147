// Device store of this step's K/V rows into their cache slots, converting to the cache dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/store_kv.h"
#include "cuda/check.h"

namespace attnkit {

namespace {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __nv_fp8_storage_t from_float<__nv_fp8_storage_t>(float x) {
  return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

// One block a token: row_elems elements of src row t go to pool row out_cache_loc[t].
template <typename Src, typename Dst>
__global__ void store_rows_kernel(Dst* __restrict__ g_pool, const Src* __restrict__ g_src,
                                  const int64_t* __restrict__ g_loc, int64_t row_elems, float inv_scale) {
  const int64_t t = blockIdx.x;
  const int64_t slot = g_loc[t];
  const Src* src = g_src + t * row_elems;
  Dst* dst = g_pool + slot * row_elems;
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
    dst[e] = from_float<Dst>(to_float(src[e]) * inv_scale);
  }
}

template <typename Src>
void launch_for_src(DType pool_dtype, void* pool, const TensorView& src, const int64_t* loc, int64_t n,
                    int64_t row, float inv_scale) {
  const dim3 grid(static_cast<unsigned>(n));
  constexpr int kThreads = 128;
  const Src* s = static_cast<const Src*>(src.data);
  switch (pool_dtype) {
    case DType::f32: store_rows_kernel<<<grid, kThreads>>>(static_cast<float*>(pool), s, loc, row, inv_scale); break;
    case DType::f16: store_rows_kernel<<<grid, kThreads>>>(static_cast<__half*>(pool), s, loc, row, inv_scale); break;
    case DType::bf16:
      store_rows_kernel<<<grid, kThreads>>>(static_cast<__nv_bfloat16*>(pool), s, loc, row, inv_scale);
      break;
    case DType::e4m3:
      store_rows_kernel<<<grid, kThreads>>>(static_cast<__nv_fp8_storage_t*>(pool), s, loc, row, inv_scale);
      break;
    default: throw Error(detail::concat("store_kv: cache dtype ", dtype_name(pool_dtype), " is not supported"));
  }
  ATTNKIT_CUDA_CHECK_LAUNCH("store_rows_kernel [", n, " tokens x ", row, " elements] -> ", dtype_name(pool_dtype));
}

void store_rows(DType pool_dtype, void* pool, float scale, const TensorView& src, const int64_t* loc, int64_t n) {
  const int64_t row = src.numel() / n;
  const float inv_scale = 1.0f / scale;
  switch (src.dtype) {
    case DType::f32: launch_for_src<float>(pool_dtype, pool, src, loc, n, row, inv_scale); break;
    case DType::f16: launch_for_src<__half>(pool_dtype, pool, src, loc, n, row, inv_scale); break;
    case DType::bf16: launch_for_src<__nv_bfloat16>(pool_dtype, pool, src, loc, n, row, inv_scale); break;
    default: throw Error(detail::concat("store_kv: source dtype ", dtype_name(src.dtype), " is not supported"));
  }
}

}  // namespace

void store_kv_cuda(const KvCacheConfig& config, void* k_pool, void* v_pool, const TensorView& k,
                   const TensorView& v, const int64_t* out_cache_loc, int64_t num_tokens) {
  const bool fp8 = config.dtype == DType::e4m3;
  store_rows(config.dtype, k_pool, fp8 ? config.k_scale : 1.0f, k, out_cache_loc, num_tokens);
  if (!config.mla) store_rows(config.dtype, v_pool, fp8 ? config.v_scale : 1.0f, v, out_cache_loc, num_tokens);
}

}  // namespace attnkit
