// StepVerifier: copies one layer of the replay's cache to the host and lets `reference` attend the
// same batch there; the comparison and tolerance are those of the conformance check (attnkit/compare.h).
#include "serving/verify.h"

#include <vector>

#include "attnkit/compare.h"
#include "attnkit/error.h"
#include "attnkit/registry.h"

namespace attnkit::serving {

StepVerifier::StepVerifier(std::vector<const KvCache*> caches, DType q_dtype)
    : caches_(std::move(caches)), q_dtype_(q_dtype) {
  ATTNKIT_CHECK(!caches_.empty(), "replay --verify: needs a cache");
  KvCacheConfig cfg = caches_.front()->config();
  cfg.num_layers = 1;
  cfg.device = Device::cpu;
  cfg.num_pages = 0;
  for (const KvCache* c : caches_) cfg.num_pages += c->config().num_pages;
  host_cache_ = std::make_unique<KvCache>(cfg);
}

StepVerifier::~StepVerifier() = default;

namespace {

void copy_pool(void* dst, const void* src, size_t nbytes, Device device) {
  const auto n = static_cast<int64_t>(nbytes);
  copy(TensorView(dst, DType::u8, Device::cpu, {n}), TensorView(const_cast<void*>(src), DType::u8, device, {n}));
}

// An exact f32 copy of a host tensor: the reference then reads the rounded inputs and writes f32,
// adding no rounding of its own (as the conformance harness does).
std::vector<float> widen(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = load_as_float(t.data, t.dtype, i);
  return out;
}

TensorView f32_view(std::vector<float>& data, const TensorView& like) {
  if (like.empty()) return TensorView();
  TensorView t = like;
  t.data = data.data();
  t.dtype = DType::f32;
  return t;
}

}  // namespace

VerifyOutcome StepVerifier::check(const ForwardBatch& batch, const AttentionSpec& spec, int layer,
                                  const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out) {
  const KvCacheConfig& cfg = caches_.front()->config();
  size_t slot0 = 0;
  for (const KvCache* c : caches_) {
    const size_t slots = static_cast<size_t>(c->config().num_slots());
    auto* k_dst = static_cast<uint8_t*>(host_cache_->k_pool(0)) + slot0 * cfg.k_slot_bytes();
    copy_pool(k_dst, c->k_pool(layer), slots * cfg.k_slot_bytes(), cfg.device);
    if (!cfg.mla) {
      auto* v_dst = static_cast<uint8_t*>(host_cache_->v_pool(0)) + slot0 * cfg.v_slot_bytes();
      copy_pool(v_dst, c->v_pool(layer), slots * cfg.v_slot_bytes(), cfg.device);
    }
    slot0 += slots;
  }

  // The reference stores this step's K/V again (the same values) and attends in fp64.
  ModelSpec one;
  one.name = "verify";
  one.layers = {spec};
  auto ref = create_backend("reference", {&one, host_cache_.get()});
  const int n = batch.num_tokens();
  std::vector<float> expected(static_cast<size_t>(n) * spec.num_qo_heads * spec.head_dim_vo);
  const TensorView ref_out(expected.data(), DType::f32, Device::cpu, {n, spec.num_qo_heads, spec.head_dim_vo});
  std::vector<float> q32 = widen(q), k32 = widen(k), v32 = v.empty() ? std::vector<float>() : widen(v);
  ref->init_forward_metadata(batch);
  ref->forward(0, f32_view(q32, q), f32_view(k32, k), f32_view(v32, v), ref_out);

  VerifyOutcome r;
  r.tolerance = default_tolerance(q_dtype_, cfg.dtype);
  const Comparison cmp = compare(out, ref_out);
  r.rel_err = cmp.rel_err;
  r.passed = cmp.within(r.tolerance);
  if (!r.passed) {
    const int64_t row = int64_t{spec.num_qo_heads} * spec.head_dim_vo;
    r.message = detail::concat("layer ", layer, ", token ", cmp.worst / row, ", head ",
                               (cmp.worst % row) / spec.head_dim_vo, ", dim ", cmp.worst % spec.head_dim_vo, ": got ",
                               cmp.got, ", reference ", cmp.want, " (relative error ", r.rel_err, ", tolerance ",
                               r.tolerance, ")");
  }
  return r;
}

}  // namespace attnkit::serving
