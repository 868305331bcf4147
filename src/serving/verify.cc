// StepVerifier: copies one layer of the replay's cache to the host and lets `reference` attend the
// same batch there; the tolerance is the conformance harness's for the dtype pair.
#include "serving/verify.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "attnkit/registry.h"
#include "harness/check.h"
#ifdef ATTNKIT_WITH_CUDA
#include "cuda/memory.h"
#endif

namespace attnkit::serving {

StepVerifier::StepVerifier(const KvCache& cache, DType q_dtype) : cache_(cache), q_dtype_(q_dtype) {
  KvCacheConfig cfg = cache.config();
  cfg.num_layers = 1;
  cfg.device = Device::cpu;
  host_cache_ = std::make_unique<KvCache>(cfg);
}

StepVerifier::~StepVerifier() = default;

namespace {

void copy_pool(void* dst, const void* src, size_t nbytes, Device device) {
  if (nbytes == 0) return;
  if (device == Device::cpu) {
    std::memcpy(dst, src, nbytes);
    return;
  }
#ifdef ATTNKIT_WITH_CUDA
  cuda::copy_device_to_host(dst, src, nbytes);
#endif
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
  const KvCacheConfig& cfg = cache_.config();
  const size_t slots = static_cast<size_t>(cfg.num_slots());
  copy_pool(host_cache_->k_pool(0), cache_.k_pool(layer), slots * cfg.k_slot_bytes(), cfg.device);
  if (!cfg.mla) copy_pool(host_cache_->v_pool(0), cache_.v_pool(layer), slots * cfg.v_slot_bytes(), cfg.device);

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
  r.tolerance = harness::default_tolerance(q_dtype_, cfg.dtype);
  double max_ref = 0.0, worst = -1.0;
  int64_t worst_idx = 0;
  bool nan = false;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double got = load_as_float(out.data, out.dtype, static_cast<int64_t>(i));
    const double want = expected[i];
    max_ref = std::max(max_ref, std::fabs(want));
    const double err = std::isfinite(got) ? std::fabs(got - want) : INFINITY;
    if (!std::isfinite(got) && !nan) {
      nan = true;
      worst = err;
      worst_idx = static_cast<int64_t>(i);
    }
    if (!nan && err > worst) {
      worst = err;
      worst_idx = static_cast<int64_t>(i);
    }
  }
  r.rel_err = max_ref > 0 ? worst / max_ref : worst;
  r.passed = !nan && r.rel_err <= r.tolerance;
  if (!r.passed) {
    const int64_t row = int64_t{spec.num_qo_heads} * spec.head_dim_vo;
    r.message = detail::concat("layer ", layer, ", token ", worst_idx / row, ", head ",
                               (worst_idx % row) / spec.head_dim_vo, ", dim ", worst_idx % spec.head_dim_vo, ": got ",
                               load_as_float(out.data, out.dtype, worst_idx), ", reference ",
                               expected[static_cast<size_t>(worst_idx)], " (relative error ", r.rel_err,
                               ", tolerance ", r.tolerance, ")");
  }
  return r;
}

}  // namespace attnkit::serving
