// Device store of this step's K/V rows into their cache slots, converting to the cache dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/store_kv.h"
#include "cuda/check.h"
#include "cuda/convert.cuh"

namespace attnkit {

namespace {

using cuda::from_float;
using cuda::to_float;

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

// fp8_blocked latents (kv_cache.h, and core/latent_fp8.cc on the host, which it matches byte for
// byte): one CTA a token, one thread a value of each block of 128; the block's largest magnitude
// by warp shuffles and shared memory.
__global__ void store_fp8_blocked_kernel(uint8_t* __restrict__ pool, const float* __restrict__ src_f32,
                                         const __half* __restrict__ src_f16, const __nv_bfloat16* __restrict__ src_bf16,
                                         const int64_t* __restrict__ g_loc, int head_dim_k, int head_dim_v,
                                         int64_t slot_bytes) {
  __shared__ float warp_max[kLatentScaleBlock / 32];
  const int64_t t = blockIdx.x;
  uint8_t* slot = pool + g_loc[t] * slot_bytes;
  const auto value = [&](int e) {
    const int64_t i = t * head_dim_k + e;
    return src_f32 ? src_f32[i] : src_f16 ? __half2float(src_f16[i]) : __bfloat162float(src_bf16[i]);
  };
  const int blocks = head_dim_v / kLatentScaleBlock;
  for (int b = 0; b < blocks; ++b) {
    const float x = value(b * kLatentScaleBlock + threadIdx.x);
    float m = fabsf(x);
    for (int d = 16; d > 0; d >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    float amax = 0.0f;
    for (int w = 0; w < kLatentScaleBlock / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    __syncthreads();  // warp_max is rewritten by the next block
    const float scale = amax > 0.0f ? amax / 448.0f : 1.0f;
    slot[b * kLatentScaleBlock + threadIdx.x] = __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3);
    if (threadIdx.x < 4) {  // the scale byte by byte: a slot's scales need not be 4-byte aligned
      slot[head_dim_v + 4 * b + threadIdx.x] = static_cast<uint8_t>(__float_as_uint(scale) >> (8 * threadIdx.x));
    }
  }
  uint8_t* tail = slot + head_dim_v + 4 * blocks;
  for (int e = head_dim_v + threadIdx.x; e < head_dim_k; e += blockDim.x) {
    // The tail starts at an even byte (512 + 16 for deepseek-v3) of an even-sized slot.
    reinterpret_cast<__nv_bfloat16*>(tail)[e - head_dim_v] = __float2bfloat16_rn(value(e));
  }
}

void store_fp8_blocked(const KvCacheConfig& config, void* pool, const TensorView& k, const int64_t* loc, int64_t n) {
  ATTNKIT_CHECK(k.dtype == DType::f32 || k.dtype == DType::f16 || k.dtype == DType::bf16,
                "store_kv: source dtype ", dtype_name(k.dtype), " is not supported");
  store_fp8_blocked_kernel<<<static_cast<unsigned>(n), kLatentScaleBlock>>>(
      static_cast<uint8_t*>(pool), k.dtype == DType::f32 ? static_cast<const float*>(k.data) : nullptr,
      k.dtype == DType::f16 ? static_cast<const __half*>(k.data) : nullptr,
      k.dtype == DType::bf16 ? static_cast<const __nv_bfloat16*>(k.data) : nullptr, loc, config.head_dim_k,
      config.head_dim_v, static_cast<int64_t>(config.k_slot_bytes()));
  ATTNKIT_CUDA_CHECK_LAUNCH("store_fp8_blocked_kernel [", n, " latents of ", config.head_dim_k, "]");
}

}  // namespace

void store_kv_cuda(const KvCacheConfig& config, void* k_pool, void* v_pool, const TensorView& k,
                   const TensorView& v, const int64_t* out_cache_loc, int64_t num_tokens) {
  if (num_tokens == 0) return;
  if (config.latent_format == LatentFormat::fp8_blocked) {
    store_fp8_blocked(config, k_pool, k, out_cache_loc, num_tokens);
    return;
  }
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
