// ReferenceBackend: stores K/V on the host, then runs the fp64 formula over the paged cache.
#include "backends/reference/backend.h"

#include "attnkit/registry.h"
#include "backends/reference/kernels/attention.h"

namespace attnkit {

void ReferenceBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out) {
  store_new_kv(layer, k, v, host_out_cache_loc());
  const AttentionSpec& spec = model().layer(layer);
  lse_.assign(static_cast<size_t>(batch().num_tokens()) * spec.num_qo_heads, 0.0f);
  reference::AttentionParams p;
  p.spec = &spec;
  p.cache = &cache().config();
  p.k_pool = cache().k_pool(layer);
  p.v_pool = cache().v_pool(layer);
  p.batch = &batch();
  p.q = q.data;
  p.q_dtype = q.dtype;
  p.out = out.data;
  p.out_dtype = out.dtype;
  p.lse = lse_output().empty() ? lse_.data() : lse_output().as<float>();
  reference::attention(p);
  if (!lse_output().empty()) lse_.assign(p.lse, p.lse + lse_.size());
}

void register_reference_backend(Registry& registry) {
  registry.add({.name = "reference",
                .description = "the formula, literally: full score rows, fp64 accumulation (ground truth)",
                .device = Device::cpu,
                .capabilities = reference::capabilities,
                .why_unavailable = {},
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<ReferenceBackend>(ctx);
                }});
}

}  // namespace attnkit
