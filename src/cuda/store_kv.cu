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

// One pool's side of a store: src row t goes to pool row out_cache_loc[t], divided by scale (the
// quotient itself is rounded: value * (1 / scale) lands a step away for some values).
template <typename Src, typename Dst>
struct StoreSide {
  Dst* pool;
  const Src* src;
  float scale;
};

// One block a (token, side): blockIdx.y 0 stores K, 1 stores V. K and V go in one launch: a decode
// step stores one row a request, so the launch, not the bytes, is the cost.
template <typename Src, typename Dst>
__global__ void store_rows_kernel(StoreSide<Src, Dst> k, StoreSide<Src, Dst> v, const int64_t* __restrict__ g_loc,
                                  int64_t row_elems) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // A kernel launched after this one with programmatic serialisation (the planned decode kernel)
  // may start its prologue now; it waits (griddepcontrol.wait) before it reads the cache.
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
  const StoreSide<Src, Dst> side = blockIdx.y == 0 ? k : v;
  const int64_t t = blockIdx.x;
  const int64_t slot = g_loc[t];
  const Src* src = side.src + t * row_elems;
  Dst* dst = side.pool + slot * row_elems;
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
    dst[e] = from_float<Dst>(to_float(src[e]) / side.scale);
  }
}

// One launch's rows: K (and V, where v_src is not null) of `n` tokens, `row` elements each.
struct RowsToStore {
  void* k_pool;
  void* v_pool;
  const void* k_src;
  const void* v_src;  // null: K only (an MLA latent cache, or V stored by its own launch)
  float k_scale, v_scale;
  const int64_t* loc;
  int64_t n, row;
};

template <typename Src, typename Dst>
void launch_store(const RowsToStore& r) {
  const StoreSide<Src, Dst> k{static_cast<Dst*>(r.k_pool), static_cast<const Src*>(r.k_src), r.k_scale};
  const StoreSide<Src, Dst> v{static_cast<Dst*>(r.v_pool), static_cast<const Src*>(r.v_src), r.v_scale};
  const dim3 grid(static_cast<unsigned>(r.n), r.v_src == nullptr ? 1u : 2u);
  store_rows_kernel<<<grid, 128>>>(k, v, r.loc, r.row);
}

template <typename Src>
void launch_for_src(DType pool_dtype, const RowsToStore& r) {
  switch (pool_dtype) {
    case DType::f32: launch_store<Src, float>(r); break;
    case DType::f16: launch_store<Src, __half>(r); break;
    case DType::bf16: launch_store<Src, __nv_bfloat16>(r); break;
    case DType::e4m3: launch_store<Src, __nv_fp8_storage_t>(r); break;
    default: throw Error(detail::concat("store_kv: cache dtype ", dtype_name(pool_dtype), " is not supported"));
  }
  ATTNKIT_CUDA_CHECK_LAUNCH("store_rows_kernel [", r.n, " tokens x ", r.row, " elements", r.v_src ? ", K and V" : "",
                            "] -> ", dtype_name(pool_dtype));
}

void store_rows(DType pool_dtype, DType src_dtype, const RowsToStore& r) {
  switch (src_dtype) {
    case DType::f32: launch_for_src<float>(pool_dtype, r); break;
    case DType::f16: launch_for_src<__half>(pool_dtype, r); break;
    case DType::bf16: launch_for_src<__nv_bfloat16>(pool_dtype, r); break;
    default: throw Error(detail::concat("store_kv: source dtype ", dtype_name(src_dtype), " is not supported"));
  }
}

}  // namespace

void store_kv_cuda(const KvCacheConfig& config, void* k_pool, void* v_pool, const TensorView& k,
                   const TensorView& v, const int64_t* out_cache_loc, int64_t num_tokens) {
  if (num_tokens == 0) return;
  const bool fp8 = config.dtype == DType::e4m3;
  const float k_scale = fp8 ? config.k_scale : 1.0f, v_scale = fp8 ? config.v_scale : 1.0f;
  const int64_t k_row = k.numel() / num_tokens;
  // K and V in one launch where they agree in type and row length (always, for a dense model's step).
  if (!config.mla && v.dtype == k.dtype && v.numel() == k.numel()) {
    store_rows(config.dtype, k.dtype, {k_pool, v_pool, k.data, v.data, k_scale, v_scale, out_cache_loc, num_tokens, k_row});
    return;
  }
  store_rows(config.dtype, k.dtype, {k_pool, nullptr, k.data, nullptr, k_scale, 1.0f, out_cache_loc, num_tokens, k_row});
  if (!config.mla) {
    store_rows(config.dtype, v.dtype,
               {v_pool, nullptr, v.data, nullptr, v_scale, 1.0f, out_cache_loc, num_tokens, v.numel() / num_tokens});
  }
}

}  // namespace attnkit
