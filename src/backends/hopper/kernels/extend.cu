// The `hopper` extend kernel's host side: the instantiations (bf16 / f16 x head dims 64, 128,
// 256 x the three ways K/V load), the tensor maps, the checks and the persistent launch.
#include "backends/hopper/kernels/extend.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>
#include <utility>

#include "attnkit/error.h"
#include "backends/hopper/config.h"
#include "backends/hopper/kernels/kernel.cuh"
#include "cuda/check.h"
#include "cuda/memory.h"
#include "cuda/smem_opt_in.h"

namespace attnkit::hopper {

namespace {

// The kernel for a head dim, dtype (of q, and of K/V as the products read them) and way of
// loading K/V (config.cuh's KvLoad).
template <typename Fn>
void with_config(int head_dim, DType dtype, KvLoad load, Fn&& fn) {
  auto by_dim = [&](auto t) {
    // Without the cvref removal, nvcc's host pass typed T as a reference inside the fp8 case's
    // `if constexpr` below: its launch named a kernel (KernelConfig<T&, ...>) the device pass never
    // compiled, and the runtime refused it ("invalid resource handle").
    using T = std::remove_cvref_t<decltype(t)>;
    auto pick = [&](auto dim) {
      constexpr int kDim = decltype(dim)::value;
      switch (load) {
        case KvLoad::tma_boxes: fn(KernelConfig<T, kDim, KvLoad::tma_boxes>{}); return;
        case KvLoad::gather: fn(KernelConfig<T, kDim, KvLoad::gather>{}); return;
        case KvLoad::gather_e4m3: fn(KernelConfig<T, kDim, KvLoad::gather_e4m3>{}); return;
        case KvLoad::tma_fp8:
          if constexpr (kDim == Support::fp8_products_head_dim) {
            fn(KernelConfig<T, kDim, KvLoad::tma_fp8>{});
            return;
          }
          throw Error(detail::concat("hopper extend: fp8 products need head_dim ", Support::fp8_products_head_dim,
                                     ", got ", kDim));
      }
    };
    switch (head_dim) {
      case 64: pick(std::integral_constant<int, 64>{}); return;
      case 128: pick(std::integral_constant<int, 128>{}); return;
      case 256: pick(std::integral_constant<int, 256>{}); return;
      default: throw Error(detail::concat("hopper extend: head_dim must be 64, 128 or 256, got ", head_dim));
    }
  };
  if (dtype == DType::bf16) {
    by_dim(__nv_bfloat16{});
  } else if (dtype == DType::f16) {
    by_dim(__half{});
  } else {
    throw Error(detail::concat("hopper extend: q dtype must be bf16 or f16, got ", dtype_name(dtype)));
  }
}

template <typename C>
void launch_config(const ExtendParams& p, const ExtendMaps& maps, cudaStream_t stream) {
  static cuda::SmemOptIn smem_opt_in;  // past 48 KB, once a device
  smem_opt_in.ensure(reinterpret_cast<const void*>(extend_kernel<C>), C::kSmemBytes);
  static const int num_sms = cuda::device_info().num_sms;
  const int work = p.num_work_items * p.num_kv_heads;
  const int grid = work < num_sms ? work : num_sms;
  extend_kernel<C><<<grid, C::kThreads, C::kSmemBytes, stream>>>(maps, p);
  ATTNKIT_CUDA_CHECK_LAUNCH("hopper extend (head_dim ", p.head_dim_qk, ", ", p.num_work_items, " work items x ",
                            p.num_kv_heads, " kv heads)");
}

}  // namespace

KvLoad kv_load(DType kv_dtype, int page_size, bool gather_asked, bool fp8_products) {
  if (kv_dtype == DType::e4m3) return fp8_products ? KvLoad::tma_fp8 : KvLoad::gather_e4m3;
  return gather_asked || page_size < Support::min_tma_page_size ? KvLoad::gather : KvLoad::tma_boxes;
}

int extend_block_m(int head_dim, KvLoad load) {
  int rows = 0;
  with_config(head_dim, DType::bf16, load, [&](auto cfg) { rows = decltype(cfg)::kBlockM; });
  return rows;
}

cuda::TensorMap make_pool_map(const void* pool, DType dtype, int head_dim, int num_kv_heads, int64_t num_slots,
                              int page_size) {
  const int64_t row = int64_t{head_dim} * static_cast<int64_t>(dtype_size(dtype));
  const int box_width = static_cast<int>(128 / dtype_size(dtype));  // 128 bytes
  return cuda::make_tensor_map("hopper kv pool", dtype, pool, {head_dim, num_kv_heads, num_slots},
                               {row, row * num_kv_heads}, {box_width, 1, page_size < kMaxBoxRows ? page_size : kMaxBoxRows});
}

cuda::TensorMap make_q_map(const ExtendParams& p) {
  const int d = p.head_dim_qk;
  const int group = p.num_qo_heads / p.num_kv_heads;
  const int64_t row = int64_t{d} * 2;
  return cuda::make_tensor_map("hopper q", p.q_dtype, p.q, {d, group, p.num_kv_heads, p.num_tokens},
                               {row, row * group, row * p.num_qo_heads}, {64, group, 1, p.tile_rows / group});
}

KvLoad kv_load(const ExtendParams& p) { return kv_load(p.kv_dtype, p.page_size, p.gather_kv, p.fp8_products); }

void check_extend_params(const ExtendParams& p) {
  auto fail = [](auto&&... parts) { throw Error(detail::concat("hopper extend: ", parts...)); };
  const KernelKey key{p.head_dim_qk, p.q_dtype, p.kv_dtype};
  const std::string why = why_unsupported(key, p.page_size, p.num_qo_heads / std::max(1, p.num_kv_heads));
  if (!why.empty()) fail(why);
  if (p.custom_mask != nullptr) fail("custom masks are not served (planned serves them)");
  if (p.fp8_products) {
    const std::string no_fp8 = why_no_fp8_products(p.kv_dtype, p.head_dim_qk, p.page_size);
    if (!no_fp8.empty()) fail(no_fp8);
    if (!(p.k_scale > 0.0f && p.v_scale > 0.0f && std::isfinite(p.k_scale) && std::isfinite(p.v_scale)))
      fail("fp8 products need finite positive k_scale and v_scale, got ", p.k_scale, " and ", p.v_scale);
  } else if (p.kv_dtype == DType::e4m3) {
    // The dequantising multiply's factor, scale x 2^120 in bf16 or x 2^8 in f16, must be a finite
    // normal number of q's type: below 255 in both, and at least 2^-22 in f16.
    const bool f16 = p.q_dtype == DType::f16;
    for (const auto& [name, scale] : {std::pair{"k_scale", p.k_scale}, std::pair{"v_scale", p.v_scale}}) {
      if (!(scale >= (f16 ? 0x1p-22f : 0.0f) && scale > 0.0f && scale < Support::max_e4m3_scale))
        fail("an e4m3 cache's ", name, " must be in ", f16 ? "[2^-22, " : "(0, ", Support::max_e4m3_scale,
             ") with ", dtype_name(p.q_dtype), " q, got ", scale, " (planned serves it)");
    }
  }
  const int rows = tile_rows(extend_block_m(p.head_dim_qk, kv_load(p)), p.num_qo_heads / p.num_kv_heads);
  if (p.tile_rows != rows) fail("the plan's tiles have ", p.tile_rows, " rows, the kernel's ", rows);
  planned::check_prefill_params(p);  // the heads, the scale and the pointers
}

void launch_extend(const ExtendParams& p, const ExtendMaps& maps, cudaStream_t stream) {
  check_extend_params(p);
  if (p.num_work_items == 0) return;
  with_config(p.head_dim_qk, p.q_dtype, kv_load(p), [&](auto cfg) { launch_config<decltype(cfg)>(p, maps, stream); });
}

}  // namespace attnkit::hopper
