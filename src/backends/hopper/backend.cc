#include "backends/hopper/backend.h"

#include <algorithm>

#include "attnkit/registry.h"
#include "cuda/memory.h"

namespace attnkit {

namespace {

// Whether the fp8 products serve this cache (asked for, and the cache allows them).
bool fp8_products_serve(const BackendOptions& options, const KvCacheConfig& c) {
  return options.hopper_fp8_products && hopper::why_no_fp8_products(c.dtype, c.head_dim_k, c.page_size).empty();
}

int prefill_rows(const BackendContext& context) {
  const std::string why = cuda::why_not_hopper();
  ATTNKIT_CHECK(why.empty(), "hopper: ", why);
  const KvCacheConfig& c = context.cache->config();
  const AttentionSpec& s = context.model->layer(0);
  ATTNKIT_CHECK(s.num_qo_heads % c.num_kv_heads == 0 && s.num_qo_heads / c.num_kv_heads <= hopper::Support::max_group,
                "hopper: num_qo_heads (", s.num_qo_heads, ") must be a multiple of num_kv_heads (", c.num_kv_heads,
                ") at most ", hopper::Support::max_group, " times it");
  // A head dim the kernel lacks plans no extend tiles; the plan's validation refuses the batch.
  const auto& dims = hopper::Support::head_dims;
  if (std::find(dims.begin(), dims.end(), c.head_dim_k) == dims.end()) return 0;
  // The rows of the kernel launch_extend will pick (kv_load's rule, as extend_params sets it).
  const hopper::KvLoad load = hopper::kv_load(c.dtype, c.page_size,
                                              context.options.hopper_kv_load == BackendOptions::HopperKvLoad::gather,
                                              fp8_products_serve(context.options, c));
  return hopper::tile_rows(hopper::extend_block_m(c.head_dim_k, load), s.num_qo_heads / c.num_kv_heads);
}

}  // namespace

HopperBackend::HopperBackend(const BackendContext& context) : PlannedBackend(context, prefill_rows(context)) {
  const KvCacheConfig& c = cache().config();
  // An e4m3 cache dequantised as it loads is read row by row (no maps); multiplied on e4m3 tensor
  // cores it comes as TMA boxes of its raw bytes; a 16-bit one the kernel serves gets its pools' maps.
  fp8_products_ = fp8_products_serve(options(), c);
  const hopper::KernelKey key{c.head_dim_k, c.dtype == DType::e4m3 ? DType::bf16 : c.dtype, c.dtype};
  if ((c.dtype == DType::e4m3 && !fp8_products_) ||
      !hopper::why_unsupported(key, c.page_size, model().layer(0).num_qo_heads / c.num_kv_heads).empty())
    return;
  for (int l = 0; l < c.num_layers; ++l) {
    pool_maps_.push_back({hopper::make_pool_map(cache().k_pool(l), c.dtype, c.head_dim_k, c.num_kv_heads, c.num_slots(),
                                                c.page_size),
                          hopper::make_pool_map(cache().v_pool(l), c.dtype, c.head_dim_k, c.num_kv_heads, c.num_slots(),
                                                c.page_size)});
  }
}

hopper::ExtendParams HopperBackend::extend_params(const planned::PrefillParams& p) const {
  hopper::ExtendParams e;
  static_cast<planned::PrefillParams&>(e) = p;
  e.tile_rows = plan_shape().prefill_rows;
  e.num_tokens = batch().num_tokens();
  e.gather_kv = options().hopper_kv_load == BackendOptions::HopperKvLoad::gather;
  e.fp8_products = fp8_products_;
  return e;
}

void HopperBackend::check_extend(const planned::PrefillParams& p) const { hopper::check_extend_params(extend_params(p)); }

void HopperBackend::launch_extend(int layer, const planned::PrefillParams& p, cudaStream_t stream) {
  const hopper::ExtendParams e = extend_params(p);
  // check_extend refused every call before the cache store where the maps were not made, but for an
  // e4m3 cache dequantised as it loads, which the kernel reads without them.
  if (pool_maps_.empty()) {
    hopper::launch_extend(e, {hopper::make_q_map(e), {}, {}}, stream);
    return;
  }
  const PoolMaps& pools = pool_maps_.at(static_cast<size_t>(layer));
  hopper::launch_extend(e, {hopper::make_q_map(e), pools.k, pools.v}, stream);
}

void register_hopper_backend(Registry& registry) {
  registry.add({.name = "hopper",
                .description = "extend on warp-specialised TMA + wgmma (sm_90a), decode on planned's kernel, one plan",
                .device = Device::cuda,
                .capabilities = hopper::capabilities,
                .why_unavailable = cuda::why_not_hopper,
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<HopperBackend>(ctx);
                }});
}

}  // namespace attnkit
