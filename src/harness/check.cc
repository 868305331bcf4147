// run_check: one case through a backend and through `reference`, on the same fresh inputs.
#include "harness/check.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "attnkit/batch.h"
#include "attnkit/compare.h"
#include "attnkit/registry.h"
#include "harness/device_copy.h"

namespace attnkit::harness {

std::string describe(const CheckCase& c) {
  std::ostringstream os;
  if (!c.label.empty()) os << c.label << ": ";
  os << c.spec.describe() << " q " << dtype_name(c.q_dtype) << " kv " << dtype_name(c.kv_dtype)
     << (c.latent_format == LatentFormat::fp8_blocked ? " fp8-blocked" : "") << " page " << c.page_size << " reqs";
  for (const auto& [p, n] : c.requests) os << ' ' << p << '+' << n;
  if (c.custom_mask) os << " custom-mask";
  return os.str();
}

namespace {

std::vector<uint8_t> tree_mask(int64_t prefix, int64_t n, std::mt19937_64& rng) {
  // Each new token sees the prefix and a random subset of the new tokens before it (a tree), and itself.
  std::vector<uint8_t> mask(static_cast<size_t>(n * (prefix + n)), 0);
  std::bernoulli_distribution keep(0.6);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t t = 0; t < prefix + n; ++t) {
      const bool visible = t < prefix ? true : t - prefix == j ? true : (t - prefix < j && keep(rng));
      mask[static_cast<size_t>(j * (prefix + n) + t)] = visible;
    }
  }
  return mask;
}

KvCacheConfig cache_config(const CheckCase& c, Device device) {
  KvCacheConfig cfg = KvCacheConfig::for_spec(c.spec, c.num_layers);
  cfg.page_size = c.page_size;
  cfg.dtype = c.kv_dtype;
  cfg.k_scale = c.k_scale;
  cfg.v_scale = c.v_scale;
  cfg.latent_format = c.latent_format;
  cfg.device = device;
  int64_t pages = 3;  // a few spare pages, so page tables are not simply 0..n-1
  for (const auto& [p, n] : c.requests) pages += (p + n + c.page_size - 1) / c.page_size;
  cfg.num_pages = static_cast<int>(pages);
  return cfg;
}

// The LSE against the reference's, every row: an error of d in a row's LSE scales that row's
// weight by e^d when partial states are merged, a relative error of about d in the merged output,
// so it is held to the output's bound. A row that sees no key is -inf on both sides; a NaN (the
// poison, a row not written) fails.
void check_lse(const TensorView& got, const TensorView& want, int layer, int heads, CheckResult& result) {
  const auto* g = got.as<const float>();
  const auto* w = want.as<const float>();
  for (int64_t i = 0; i < got.numel(); ++i) {
    const bool both_empty = std::isinf(g[i]) && std::isinf(w[i]) && g[i] < 0 && w[i] < 0;
    const double err = both_empty ? 0.0
                       : std::isfinite(g[i]) && std::isfinite(w[i]) ? std::fabs(double{g[i]} - w[i])
                                                                    : INFINITY;
    if (err > result.lse_max_abs_err) {
      result.lse_max_abs_err = err;
      std::ostringstream os;
      os << "worst LSE: layer " << layer << " token " << i / heads << " head " << i % heads << ": got " << g[i]
         << ", reference " << w[i];
      result.lse_message = os.str();
    }
  }
}

}  // namespace

void fill_prefix(KvCache& cache, const ForwardBatch& batch, const AttentionSpec& spec, uint64_t seed) {
  const KvCacheConfig& cfg = cache.config();
  std::vector<int64_t> slots;
  for (int i = 0; i < batch.batch_size(); ++i) {
    for (int64_t t = 0; t < batch.prefix_lens[i]; ++t) slots.push_back(batch.slot(i, t));
  }
  if (slots.empty()) return;
  const auto n = static_cast<int64_t>(slots.size());
  for (int layer = 0; layer < cfg.num_layers; ++layer) {
    Staged loc(cfg.device, DType::i64, {n});
    std::copy(slots.begin(), slots.end(), static_cast<int64_t*>(loc.host_data()));
    Staged k(cfg.device, DType::f32, {n, cfg.num_kv_heads, cfg.head_dim_k});
    fill_uniform(k.host(), seed * 7919 + static_cast<uint64_t>(layer) * 2 + 0, -1.0f, 1.0f);
    loc.upload();
    k.upload();
    if (spec.is_mla()) {
      cache.store(layer, k.dev(), TensorView(), loc.dev());
    } else {
      Staged v(cfg.device, DType::f32, {n, cfg.num_kv_heads, cfg.head_dim_v});
      fill_uniform(v.host(), seed * 7919 + static_cast<uint64_t>(layer) * 2 + 1, -1.0f, 1.0f);
      v.upload();
      cache.store(layer, k.dev(), v.dev(), loc.dev());
    }
  }
  synchronize(cfg.device);
}

CheckResult run_check(const std::string& backend, const CheckCase& c, const BackendOptions& options) {
  CheckResult result;
  const BackendInfo& info = Registry::global().get(backend);
  if (info.why_unavailable) result.skipped = info.why_unavailable();
  if (!result.skipped.empty()) return result;
  c.spec.validate();
  const Capabilities caps = info.capabilities();
  const KvCacheConfig dev_cfg = cache_config(c, caps.device);
  result.skipped = why_unsupported(caps, c.spec, dev_cfg, nullptr, c.q_dtype);
  if (!result.skipped.empty()) return result;

  ModelSpec model;
  model.name = "check";
  model.layers.assign(static_cast<size_t>(c.num_layers), c.spec);
  KvCache dev_cache(dev_cfg);
  KvCache ref_cache(cache_config(c, Device::cpu));
  if (c.shuffle_pages) dev_cache.allocator().shuffle(c.seed);  // the reference keeps pages in order

  std::mt19937_64 rng(c.seed);
  std::vector<RequestStep> steps;
  for (const auto& [prefix, n] : c.requests) {
    RequestStep s;
    s.prefix_len = prefix;
    s.num_new_tokens = n;
    if (c.custom_mask && n > 0) s.custom_mask = tree_mask(prefix, n, rng);
    steps.push_back(std::move(s));
  }
  const ForwardBatch dev_batch = build_batch(dev_cache, steps);
  const ForwardBatch ref_batch = build_batch(ref_cache, steps);
  result.skipped = why_unsupported(caps, c.spec, dev_cfg, &dev_batch, c.q_dtype);
  if (!result.skipped.empty()) return result;
  fill_prefix(dev_cache, dev_batch, c.spec, c.seed);
  fill_prefix(ref_cache, ref_batch, c.spec, c.seed);

  auto dut = create_backend(backend, {&model, &dev_cache, options});
  auto ref = create_backend("reference", {&model, &ref_cache});
  dut->init_forward_metadata(dev_batch);
  ref->init_forward_metadata(ref_batch);

  const int64_t n = dev_batch.num_tokens();
  const AttentionSpec& s = c.spec;
  // The backend says what its products round to (hopper's fp8 products: e4m3, where they run).
  result.tolerance = c.tolerance > 0 ? c.tolerance : default_tolerance(dut->products_dtype(c.q_dtype), c.kv_dtype);
  double worst_ratio = -1.0;
  // Where the backend writes the LSE, it is checked too (poisoned before every layer, every row).
  Staged lse(caps.device, DType::f32, {n, s.num_qo_heads});
  Staged ref_lse(Device::cpu, DType::f32, {n, s.num_qo_heads});
  result.lse_checked = caps.lse;
  for (int layer = 0; layer < c.num_layers; ++layer) {
    const uint64_t seed = c.seed * 1000003 + static_cast<uint64_t>(layer) * 4;
    Staged q(caps.device, c.q_dtype, {n, s.num_qo_heads, s.head_dim_qk});
    Staged k(caps.device, c.q_dtype, {n, s.num_kv_heads, s.head_dim_qk});
    Staged v(caps.device, c.q_dtype, {n, s.num_kv_heads, s.head_dim_vo});
    Staged out(caps.device, c.q_dtype, {n, s.num_qo_heads, s.head_dim_vo});
    Staged ref_out(Device::cpu, DType::f32, {n, s.num_qo_heads, s.head_dim_vo});
    fill_uniform(q.host(), seed + 0, -2.0f, 2.0f);
    fill_uniform(k.host(), seed + 1, -1.0f, 1.0f);
    fill_uniform(v.host(), seed + 2, -1.0f, 1.0f);
    q.upload();
    k.upload();
    v.upload();
    out.poison();
    ref_out.poison();
    lse.poison();
    ref_lse.poison();
    const TensorView no_v;
    dut->forward(layer, q.dev(), k.dev(), s.is_mla() ? no_v : v.dev(), out.dev(),
                 caps.lse ? lse.dev() : TensorView());
    dut->synchronize();
    out.download();
    if (caps.lse) lse.download();
    // The reference reads exact f32 copies of the rounded inputs and writes f32: no rounding of its own.
    const Staged q32 = widen_to_f32(q), k32 = widen_to_f32(k), v32 = widen_to_f32(v);
    ref->forward(layer, q32.host(), k32.host(), s.is_mla() ? no_v : v32.host(), ref_out.host(),
                 caps.lse ? ref_lse.host() : TensorView());
    if (caps.lse) check_lse(lse.host(), ref_lse.host(), layer, s.num_qo_heads, result);

    // Every element, as written: a NaN (the poison) or an error over the bound fails.
    const Comparison cmp = compare(out.host(), ref_out.host());
    if (cmp.rel_err > worst_ratio) {
      worst_ratio = cmp.rel_err;
      const int64_t e = cmp.worst, dim = s.head_dim_vo, heads = s.num_qo_heads;
      std::ostringstream os;
      os << "worst element: layer " << layer << " token " << e / (dim * heads) << " head " << (e / dim) % heads
         << " dim " << e % dim << " (flat " << e << "): got " << cmp.got << ", reference " << cmp.want;
      result.message = os.str();
    }
    result.max_abs_err = std::max(result.max_abs_err, cmp.max_abs_err);
    result.rel_err = std::max(result.rel_err, cmp.rel_err);
  }
  result.passed = result.rel_err <= result.tolerance && result.lse_max_abs_err <= result.tolerance;
  if (result.rel_err <= result.tolerance && !result.passed) result.message = result.lse_message;
  return result;
}

}  // namespace attnkit::harness
