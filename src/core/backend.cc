// AttentionBackend's public entry points: validate once, then hand over to the backend.
#include "attnkit/backend.h"

#include <algorithm>

namespace attnkit {

AttentionBackend::AttentionBackend(const BackendContext& context) : context_(context) {
  ATTNKIT_CHECK(context.model != nullptr, "backend: the context's model must not be null");
  ATTNKIT_CHECK(context.cache != nullptr, "backend: the context's cache must not be null");
  ATTNKIT_CHECK(context.cache->config().num_layers >= context.model->num_layers(), "backend: the cache has ",
                context.cache->config().num_layers, " layers, the model ", context.model->num_layers());
  for (int l = 0; l < context.model->num_layers(); ++l) {
    layer_params_.push_back(make_layer_params(context.model->layer(l), context.cache->config()));
  }
}

const Capabilities& AttentionBackend::caps() const {
  if (!caps_) caps_ = std::make_unique<Capabilities>(capabilities());
  return *caps_;
}

const ForwardBatch& AttentionBackend::batch() const {
  ATTNKIT_CHECK(batch_ != nullptr, name(), ": init_forward_metadata must be called before forward");
  return *batch_;
}

TensorView AttentionBackend::host_out_cache_loc() const {
  const ForwardBatch& b = batch();
  return TensorView(const_cast<int64_t*>(b.out_cache_loc.data()), DType::i64, Device::cpu,
                    {static_cast<int64_t>(b.out_cache_loc.size())});
}

void AttentionBackend::init_forward_metadata(const ForwardBatch& batch) {
  const KvCacheConfig& cache_config = cache().config();
  if (plan_checks_page_indices()) {
    batch.validate_except_page_range(cache_config);
  } else {
    batch.validate(cache_config);
  }
  // Every layer's spec against the capabilities and the cache is checked in full until it has
  // passed once (none of them changes); after that only what a batch adds (its mode, its masks),
  // which does not depend on the layer: one layer's check instead of one a layer.
  const int layers = layers_checked_ ? std::min(1, model().num_layers()) : model().num_layers();
  for (int l = 0; l < layers; ++l) {
    const std::string why = why_unsupported(caps(), model().layer(l), cache_config, &batch);
    ATTNKIT_CHECK(why.empty(), name(), ": ", why, " (layer ", l, ")");
  }
  layers_checked_ = true;
  batch_ = nullptr;  // a failed plan leaves no stale batch behind
  plan(batch);
  batch_ = &batch;
}

void AttentionBackend::validate_forward(const char* entry, int layer, const TensorView& q, const TensorView& k,
                                        const TensorView& v, const TensorView& out, const TensorView& lse) const {
  const ForwardBatch& b = batch();
  const AttentionSpec& spec = model().layer(layer);
  const KvCacheConfig& c = cache().config();
  const std::string who = name() + " " + entry;
  ATTNKIT_CHECK(c.num_kv_heads == spec.num_kv_heads && c.head_dim_k == spec.head_dim_qk &&
                    c.head_dim_v == spec.head_dim_vo && c.mla == spec.is_mla(),
                who, ": the cache holds ", c.num_kv_heads, " kv heads of ", c.head_dim_k, "/", c.head_dim_v,
                (c.mla ? " (MLA)" : ""), ", layer ", layer, " needs ", spec.num_kv_heads, " of ", spec.head_dim_qk,
                "/", spec.head_dim_vo, (spec.is_mla() ? " (MLA)" : ""));
  const int64_t n = b.num_tokens();
  auto check = [&](const char* field, const TensorView& t, int64_t heads, int64_t dim) {
    ATTNKIT_CHECK(!t.empty(), who, ": ", field, " must not be empty");
    ATTNKIT_CHECK(t.rank == 3 && t.dim(0) == n && t.dim(1) == heads && t.dim(2) == dim, who, ": ", field,
                  " must be [", n, ", ", heads, ", ", dim, "], got ", t.describe());
    ATTNKIT_CHECK(t.dtype == q.dtype, who, ": ", field, " dtype must match q (", dtype_name(q.dtype), "), got ",
                  dtype_name(t.dtype));
    ATTNKIT_CHECK(t.device == caps().device, who, ": ", field, " must be on ", device_name(caps().device), ", got ",
                  device_name(t.device));
  };
  check("q", q, spec.num_qo_heads, spec.head_dim_qk);
  if (spec.is_mla()) {
    ATTNKIT_CHECK(v.empty(), who, ": MLA stores the latent as k; v must be empty, got ", v.describe());
  }
  // k and v both empty: the new tokens' K/V are in the cache already (backend.h).
  const bool stored = k.empty() && v.empty();
  if (!stored) {
    check("k", k, spec.num_kv_heads, spec.head_dim_qk);
    if (!spec.is_mla()) check("v", v, spec.num_kv_heads, spec.head_dim_vo);
  }
  check("out", out, spec.num_qo_heads, spec.head_dim_vo);
  if (!lse.empty()) {
    ATTNKIT_CHECK(caps().lse, who, ": this backend does not write the LSE (lse must be empty)");
    ATTNKIT_CHECK(lse.rank == 2 && lse.dim(0) == n && lse.dim(1) == spec.num_qo_heads && lse.dtype == DType::f32 &&
                      lse.device == caps().device,
                  who, ": lse must be f32 [", n, ", ", spec.num_qo_heads, "] on ", device_name(caps().device), ", got ",
                  lse.describe());
  }
  const std::string why = why_unsupported(caps(), spec, c, &b, q.dtype);
  ATTNKIT_CHECK(why.empty(), name(), ": ", why);
}

namespace {
// Holds the lse output for one call, and forgets it however the call ends.
class LseScope {
 public:
  LseScope(TensorView& slot, const TensorView& lse) : slot_(slot) { slot_ = lse; }
  ~LseScope() { slot_ = TensorView(); }
  LseScope(const LseScope&) = delete;
  LseScope& operator=(const LseScope&) = delete;

 private:
  TensorView& slot_;
};
}  // namespace

void AttentionBackend::forward_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const TensorView& lse) {
  validate_forward("forward_extend", layer, q, k, v, out, lse);
  LseScope scope(lse_output_, lse);
  run_extend(layer, q, k, v, out);
}

void AttentionBackend::forward_decode(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const TensorView& lse) {
  validate_forward("forward_decode", layer, q, k, v, out, lse);
  ATTNKIT_CHECK(batch().mode == ForwardMode::decode, name(), " forward_decode: the batch mode must be decode, got ",
                forward_mode_name(batch().mode));
  LseScope scope(lse_output_, lse);
  run_decode(layer, q, k, v, out);
}

void AttentionBackend::forward(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& lse) {
  if (batch().mode == ForwardMode::decode) {
    forward_decode(layer, q, k, v, out, lse);
  } else {
    forward_extend(layer, q, k, v, out, lse);
  }
}

void AttentionBackend::init_cuda_graph_state(int, int) {
  throw Error(name() + ": CUDA graphs are not supported");
}

}  // namespace attnkit
