// The conformance table every backend runs, and random cases drawn within a backend's capabilities.
#include <algorithm>
#include <random>

#include "harness/check.h"

namespace attnkit::harness {

namespace {

AttentionSpec heads(int q, int kv, int dim) { return AttentionSpec::dense(q, kv, dim); }
AttentionSpec mla(int q, int rank, int rope) { return AttentionSpec::mla(q, rank, rope, 0.125f); }

CheckCase make(std::string label, AttentionSpec spec, std::vector<std::pair<int64_t, int64_t>> requests) {
  CheckCase c;
  c.label = std::move(label);
  c.spec = std::move(spec);
  c.requests = std::move(requests);
  return c;
}

}  // namespace

std::vector<CheckCase> standard_cases() {
  std::vector<CheckCase> cases;
  const AttentionSpec gqa4 = heads(8, 2, 64);
  auto add = [&](CheckCase c) {
    c.seed = cases.size() + 1;
    cases.push_back(std::move(c));
  };
  // Lengths at the edges.
  add(make("kv_len 0 and 1", gqa4, {{0, 0}, {0, 1}, {3, 2}}));
  add(make("decode, kv_len 1", gqa4, {{0, 1}, {6, 1}, {40, 1}}));
  { auto c = make("page size 1", gqa4, {{5, 3}, {17, 1}, {0, 9}}); c.page_size = 1; add(c); }
  add(make("partial last pages", gqa4, {{21, 16}, {0, 37}, {49, 1}}));
  { auto c = make("page size 256", gqa4, {{300, 20}, {0, 5}}); c.page_size = 256; add(c); }
  // Head layouts: GQA ratios 1, 4, 8, MQA; head dims 64, 128, 256.
  add(make("MHA", heads(4, 4, 64), {{30, 12}, {7, 1}}));
  add(make("GQA 8", heads(16, 2, 128), {{64, 33}, {100, 1}}));
  add(make("MQA", heads(8, 1, 128), {{45, 8}, {12, 1}}));
  add(make("head_dim 256", heads(4, 2, 256), {{40, 17}, {9, 1}}));
  add(make("llama3-8b heads, decode", heads(32, 8, 128), {{511, 1}, {64, 1}, {1000, 1}}));
  add(make("llama3-8b heads, extend", heads(32, 8, 128), {{0, 70}, {90, 40}}));
  // Masks and logit transforms.
  { auto c = make("non-causal", gqa4, {{20, 24}, {0, 9}}); c.spec.causal = false; add(c); }
  { auto c = make("window 7", gqa4, {{40, 25}, {60, 1}}); c.spec.window_left = 7; add(c); }
  { auto c = make("window 0", gqa4, {{10, 4}, {3, 1}}); c.spec.window_left = 0; add(c); }
  { auto c = make("soft-cap 5", gqa4, {{33, 20}, {50, 1}}); c.spec.logits_soft_cap = 5.0f; add(c); }
  {
    auto c = make("sinks", gqa4, {{33, 20}, {50, 1}});
    c.spec.sinks = {0.5f, -1.0f, 2.0f, 0.0f, -3.0f, 1.5f, 0.25f, -0.5f};
    add(c);
  }
  { auto c = make("custom tree mask", gqa4, {{20, 6}, {0, 11}, {5, 1}}); c.custom_mask = true; add(c); }
  // Dtypes.
  { auto c = make("f16", gqa4, {{30, 10}, {70, 1}}); c.q_dtype = DType::f16; c.kv_dtype = DType::f16; add(c); }
  { auto c = make("bf16 q, f16 cache", gqa4, {{30, 10}, {70, 1}}); c.kv_dtype = DType::f16; add(c); }
  {
    auto c = make("e4m3 cache", heads(8, 2, 128), {{90, 10}, {200, 1}});
    c.kv_dtype = DType::e4m3;
    c.k_scale = 0.25f;
    c.v_scale = 0.5f;
    add(c);
  }
  { auto c = make("f32", gqa4, {{30, 10}, {70, 1}}); c.q_dtype = DType::f32; c.kv_dtype = DType::f32; add(c); }
  // Modes.
  add(make("mixed", heads(8, 2, 128), {{100, 1}, {0, 30}, {250, 1}, {40, 12}}));
  add(make("decode, skewed lengths", heads(8, 2, 128), {{700, 1}, {3, 1}, {5, 1}, {127, 1}}));
  // MLA, absorbed.
  add(make("MLA small", mla(8, 64, 16), {{40, 6}, {25, 1}}));
  add(make("MLA deepseek dims, decode", mla(16, 512, 64), {{70, 1}, {33, 1}}));
  {
    auto c = make("MLA fp8 blocked latent", mla(16, 512, 64), {{70, 1}, {20, 9}});
    c.kv_dtype = DType::e4m3;
    c.latent_format = LatentFormat::fp8_blocked;
    add(c);
  }
  return cases;
}

std::vector<CheckCase> random_cases(const ModelSpec& model, const Capabilities& caps, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](auto const& v) { return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)]; };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<int> page_sizes;
  for (int p : {1, 2, 16, 64, 256}) {
    const bool listed = caps.page_sizes.empty() ||
                        std::find(caps.page_sizes.begin(), caps.page_sizes.end(), p) != caps.page_sizes.end();
    if (p >= caps.min_page_size && p <= caps.max_page_size && listed) page_sizes.push_back(p);
  }
  if (page_sizes.empty()) page_sizes.push_back(caps.page_sizes.empty() ? caps.min_page_size : caps.page_sizes.front());
  std::vector<CheckCase> cases;
  for (int i = 0; i < count; ++i) {
    CheckCase c;
    c.seed = seed * 100 + static_cast<uint64_t>(i) + 1;
    c.spec = model.layers[static_cast<size_t>(uniform(0, model.num_layers() - 1))];
    c.q_dtype = caps.q_dtypes.empty() ? DType::bf16 : pick(caps.q_dtypes);
    c.kv_dtype = caps.kv_dtypes.empty() ? DType::bf16 : pick(caps.kv_dtypes);
    if (caps.kv_dtype_is_q_dtype && c.kv_dtype != DType::e4m3) c.kv_dtype = c.q_dtype;
    if (c.q_dtype == DType::f32 && c.kv_dtype != DType::f32 && chance(0.5)) c.kv_dtype = DType::f32;
    if (c.kv_dtype == DType::e4m3) {
      c.k_scale = 0.5f;
      c.v_scale = c.spec.is_mla() ? 1.0f : 0.25f;  // an MLA latent has the one k_scale
      const bool blocked_only = c.spec.is_mla() && !caps.plain_e4m3_latent;
      if (caps.fp8_blocked_latent && c.spec.is_mla() && c.spec.head_dim_vo % kLatentScaleBlock == 0 &&
          (blocked_only || chance(0.5))) {
        c.latent_format = LatentFormat::fp8_blocked;  // its scales are per block: no k_scale
        c.k_scale = 1.0f;
      }
    }
    c.page_size = pick(page_sizes);
    // Features: keep the model's own, add others the backend claims.
    if (caps.causal && caps.non_causal) c.spec.causal = !chance(0.25);
    if (!caps.window) c.spec.window_left = -1;
    else if (c.spec.window_left < 0 && chance(0.2)) c.spec.window_left = static_cast<int>(uniform(0, 64));
    if (!caps.soft_cap) c.spec.logits_soft_cap = 0.0f;
    else if (chance(0.2)) c.spec.logits_soft_cap = 30.0f;
    if (!caps.sinks) c.spec.sinks.clear();
    c.custom_mask = caps.custom_mask && caps.extend && chance(0.15);
    // Lengths: small enough for the fp64 reference (MLA's 128 heads x 576 get shorter histories).
    const bool wide = c.spec.is_mla() || c.spec.num_qo_heads * c.spec.head_dim_qk > 4096;
    const int64_t max_prefix = wide ? 150 : 400;
    const int64_t max_new = wide ? 12 : 48;
    std::vector<int> modes;
    if (caps.extend && !c.custom_mask) modes.push_back(0);
    if (caps.decode && !c.custom_mask) modes.push_back(1);
    if (caps.mixed || c.custom_mask) modes.push_back(2);
    const int mode = modes.empty() ? 1 : pick(modes);
    const int batch = static_cast<int>(uniform(1, 4));
    for (int r = 0; r < batch; ++r) {
      const bool one = mode == 1 || (mode == 2 && r % 2 == 0);
      int64_t n = one ? 1 : uniform(2, max_new);
      int64_t prefix = chance(0.3) ? 0 : uniform(0, max_prefix);
      c.requests.emplace_back(prefix, n);
    }
    c.label = "random " + std::to_string(i);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace attnkit::harness
