// The reference on cases computed by hand: a 4x4 causal example, GQA head mapping, window,
// soft-cap, sinks, a fully masked row, and MLA against the explicit up-projected computation.
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/registry.h"
#include "harness/device_copy.h"

namespace attnkit {
namespace {

// One layer of `spec` over an f32 cache of 8 pages of 2 slots: the cases worked out by hand.
struct Hand {
  explicit Hand(const AttentionSpec& spec) : cache(config(spec)) {
    model.name = "hand";
    model.layers = {spec};
  }
  static KvCacheConfig config(const AttentionSpec& spec) {
    KvCacheConfig c = KvCacheConfig::for_spec(spec);
    c.num_pages = 8;
    c.page_size = 2;
    c.dtype = DType::f32;
    return c;
  }
  ModelSpec model;
  KvCache cache;
};

// One request of `n` new tokens (no prefix), f32 everywhere, page size 2: runs `spec` and returns out.
std::vector<float> run(const AttentionSpec& spec, int n, const std::vector<float>& q, const std::vector<float>& k,
                       const std::vector<float>& v, int prefix = 0) {
  Hand hand(spec);
  ModelSpec& model = hand.model;
  KvCache& cache = hand.cache;
  ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = prefix, .num_new_tokens = n - prefix, .custom_mask = {}}});
  auto backend = create_backend("reference", {&model, &cache});
  if (prefix > 0) {  // the first `prefix` tokens' K/V go straight into the cache
    std::vector<int64_t> loc;
    for (int t = 0; t < prefix; ++t) loc.push_back(b.slot(0, t));
    cache.store(0, TensorView(const_cast<float*>(k.data()), DType::f32, Device::cpu, {prefix, spec.num_kv_heads, spec.head_dim_qk}),
                spec.is_mla() ? TensorView()
                              : TensorView(const_cast<float*>(v.data()), DType::f32, Device::cpu, {prefix, spec.num_kv_heads, spec.head_dim_vo}),
                TensorView(loc.data(), DType::i64, Device::cpu, {prefix}));
  }
  const int m = n - prefix;
  std::vector<float> out(static_cast<size_t>(m * spec.num_qo_heads * spec.head_dim_vo), NAN);
  backend->init_forward_metadata(b);
  auto at = [&](const std::vector<float>& x, int row_elems) {
    return const_cast<float*>(x.data()) + static_cast<size_t>(prefix * row_elems);
  };
  const int kr = spec.num_kv_heads * spec.head_dim_qk, vr = spec.num_kv_heads * spec.head_dim_vo;
  backend->forward(0, TensorView(const_cast<float*>(q.data()), DType::f32, Device::cpu, {m, spec.num_qo_heads, spec.head_dim_qk}),
                   TensorView(at(k, kr), DType::f32, Device::cpu, {m, spec.num_kv_heads, spec.head_dim_qk}),
                   spec.is_mla() ? TensorView() : TensorView(at(v, vr), DType::f32, Device::cpu, {m, spec.num_kv_heads, spec.head_dim_vo}),
                   TensorView(out.data(), DType::f32, Device::cpu, {m, spec.num_qo_heads, spec.head_dim_vo}));
  return out;
}

AttentionSpec one_head(int dim) {
  AttentionSpec s;
  s.num_qo_heads = s.num_kv_heads = 1;
  s.head_dim_qk = s.head_dim_vo = dim;
  s.sm_scale = 1.0f;
  return s;
}

TEST(Reference, FourByFourCausalByHand) {
  const std::vector<float> q = {1, 0, 0, 1, 1, 1, 0, 0};
  const std::vector<float> k = {1, 0, 0, 1, 1, 1, 2, 0};
  const std::vector<float> v = {1, 0, 0, 1, 1, 1, 0, 2};
  const std::vector<float> out = run(one_head(2), 4, q, k, v);
  const double e = std::exp(1.0);
  // Row 0 sees key 0 alone; row 1 scores (0, 1); row 2 scores (1, 1, 2); row 3 scores all 0.
  const std::vector<double> want = {1, 0, 1 / (1 + e), e / (1 + e), (1 + e) / (2 + e), (1 + e) / (2 + e), 0.5, 1.0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << i;
}

TEST(Reference, WritesTheLseWhereAskedAndOthersRefuseIt) {
  Hand hand(one_head(2));
  const ForwardBatch b = build_batch(hand.cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 2, .custom_mask = {}}});
  std::vector<float> q = {1, 0, 0, 1}, k = {1, 0, 0, 1}, v = {1, 0, 0, 1}, out(4), lse(2, NAN);
  auto view = [](std::vector<float>& x) { return TensorView(x.data(), DType::f32, Device::cpu, {2, 1, 2}); };
  const TensorView lse_view(lse.data(), DType::f32, Device::cpu, {2, 1});
  for (const char* name : {"reference", "cpu"}) {
    auto backend = create_backend(name, {&hand.model, &hand.cache});
    backend->init_forward_metadata(b);
    if (backend->caps().lse) {
      backend->forward(0, view(q), view(k), view(v), view(out), lse_view);
      EXPECT_NEAR(lse[0], 1.0, 1e-6);                       // row 0 sees key 0 alone: score 1
      EXPECT_NEAR(lse[1], std::log(1.0 + std::exp(1.0)), 1e-6);  // row 1 scores (0, 1)
    } else {
      try {
        backend->forward(0, view(q), view(k), view(v), view(out), lse_view);
        FAIL() << name << " accepted an lse output it does not write";
      } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "cpu forward_extend: this backend does not write the LSE (lse must be empty)");
      }
    }
  }
}

TEST(Reference, ChunkedPrefillSeesThePrefix) {
  // The same 4x4 example with the first two tokens already cached: rows 2 and 3 must not change.
  const std::vector<float> q = {1, 1, 0, 0};
  const std::vector<float> k = {1, 0, 0, 1, 1, 1, 2, 0};
  const std::vector<float> v = {1, 0, 0, 1, 1, 1, 0, 2};
  const std::vector<float> out = run(one_head(2), 4, q, k, v, /*prefix=*/2);
  const double e = std::exp(1.0);
  const std::vector<double> want = {(1 + e) / (2 + e), (1 + e) / (2 + e), 0.5, 1.0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << i;
}

TEST(Reference, WindowKeepsTheLastKeys) {
  AttentionSpec s = one_head(2);
  s.window_left = 1;
  const std::vector<float> zeros(8, 0.0f);
  const std::vector<float> v = {1, 0, 0, 1, 1, 1, 0, 2};
  const std::vector<float> out = run(s, 4, zeros, zeros, v);
  // Row 3 averages keys 2 and 3 only; row 0 sees key 0 alone.
  EXPECT_NEAR(out[6], 0.5, 1e-6);
  EXPECT_NEAR(out[7], 1.5, 1e-6);
  EXPECT_NEAR(out[0], 1.0, 1e-6);
}

TEST(Reference, GqaHeadMapping) {
  AttentionSpec s;
  s.num_qo_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim_qk = s.head_dim_vo = 1;
  std::vector<float> q(3 * 4, 0.3f), k(3 * 2, 0.1f), v = {1, -1, 1, -1, 1, -1};  // kv head 0: +1, head 1: -1
  const std::vector<float> out = run(s, 3, q, k, v);
  for (int t = 0; t < 3; ++t) {
    EXPECT_NEAR(out[t * 4 + 0], 1.0, 1e-6);
    EXPECT_NEAR(out[t * 4 + 1], 1.0, 1e-6);
    EXPECT_NEAR(out[t * 4 + 2], -1.0, 1e-6);
    EXPECT_NEAR(out[t * 4 + 3], -1.0, 1e-6);
  }
}

TEST(Reference, SoftCapByHand) {
  AttentionSpec s = one_head(1);
  s.causal = false;
  s.logits_soft_cap = 1.0f;
  const std::vector<float> q = {10, 10}, k = {1, 0}, v = {3, 5};
  const std::vector<float> out = run(s, 2, q, k, v);
  const double w = std::exp(std::tanh(10.0));  // score 10 capped to tanh(10); score 0 stays 0
  EXPECT_NEAR(out[0], (w * 3 + 5) / (w + 1), 1e-6);
}

TEST(Reference, SinkJoinsTheDenominator) {
  AttentionSpec s = one_head(1);
  s.causal = false;
  s.sinks = {0.7f};
  const std::vector<float> q = {0, 0, 0}, k = {1, 2, 3}, v = {1, 2, 6};
  const std::vector<float> out = run(s, 3, q, k, v);
  EXPECT_NEAR(out[0], 9.0 / (3.0 + std::exp(0.7)), 1e-6);
}

TEST(Reference, FullyMaskedRowIsZero) {
  // A tree mask whose second row sees nothing: zeros, never NaN.
  ModelSpec model;
  model.name = "mask";
  model.layers = {one_head(2)};
  KvCacheConfig c;
  c.num_pages = 4;
  c.page_size = 2;
  c.num_kv_heads = 1;
  c.head_dim_k = c.head_dim_v = 2;
  c.dtype = DType::f32;
  KvCache cache(c);
  ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 2, .custom_mask = {1, 0, 0, 0}}});
  auto backend = create_backend("reference", {&model, &cache});
  backend->init_forward_metadata(b);
  std::vector<float> q = {1, 2, 3, 4}, k = q, v = q, out(4, NAN);
  backend->forward(0, TensorView(q.data(), DType::f32, Device::cpu, {2, 1, 2}),
                   TensorView(k.data(), DType::f32, Device::cpu, {2, 1, 2}),
                   TensorView(v.data(), DType::f32, Device::cpu, {2, 1, 2}),
                   TensorView(out.data(), DType::f32, Device::cpu, {2, 1, 2}));
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.0f);
}

TEST(Reference, MlaMatchesTheUpProjectedComputation) {
  constexpr int kHeads = 2, kRank = 4, kRope = 2, kNope = 3, kDv = 3, kTokens = 5;
  std::vector<float> latent(kTokens * (kRank + kRope)), w_uk(kHeads * kRank * kNope), w_uv(kHeads * kRank * kDv),
      q_nope(kTokens * kHeads * kNope), q_rope(kTokens * kHeads * kRope);
  auto fill = [](std::vector<float>& x, uint64_t seed) {
    harness::fill_uniform(TensorView(x.data(), DType::f32, Device::cpu, {static_cast<int64_t>(x.size())}), seed, -1, 1);
  };
  fill(latent, 1), fill(w_uk, 2), fill(w_uv, 3), fill(q_nope, 4), fill(q_rope, 5);
  const double scale = 1.0 / std::sqrt(double{kNope + kRope});
  // Explicit: per head, k = [c W_UK, k_rope], v = c W_UV, causal softmax(q k^T * scale) v.
  std::vector<double> want(kTokens * kHeads * kDv, 0.0);
  for (int h = 0; h < kHeads; ++h) {
    for (int i = 0; i < kTokens; ++i) {
      std::vector<double> s(i + 1);
      double m = -INFINITY, z = 0;
      for (int t = 0; t <= i; ++t) {
        double dot = 0;
        for (int d = 0; d < kNope; ++d) {
          double kd = 0;
          for (int r = 0; r < kRank; ++r) kd += latent[t * 6 + r] * w_uk[(h * kRank + r) * kNope + d];
          dot += q_nope[(i * kHeads + h) * kNope + d] * kd;
        }
        for (int d = 0; d < kRope; ++d) dot += q_rope[(i * kHeads + h) * kRope + d] * latent[t * 6 + kRank + d];
        s[t] = dot * scale;
        m = std::max(m, s[t]);
      }
      for (int t = 0; t <= i; ++t) z += std::exp(s[t] - m);
      for (int t = 0; t <= i; ++t) {
        for (int d = 0; d < kDv; ++d) {
          double vd = 0;
          for (int r = 0; r < kRank; ++r) vd += latent[t * 6 + r] * w_uv[(h * kRank + r) * kDv + d];
          want[(i * kHeads + h) * kDv + d] += std::exp(s[t] - m) / z * vd;
        }
      }
    }
  }
  // Absorbed: q' = [W_UK q_nope, q_rope] against the latent; out = (P c) W_UV.
  const AttentionSpec mla = AttentionSpec::mla(kHeads, kRank, kRope, static_cast<float>(scale));
  std::vector<float> q_abs(kTokens * kHeads * (kRank + kRope));
  for (int i = 0; i < kTokens; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      float* dst = &q_abs[(i * kHeads + h) * (kRank + kRope)];
      for (int r = 0; r < kRank; ++r) {
        double acc = 0;
        for (int d = 0; d < kNope; ++d) acc += w_uk[(h * kRank + r) * kNope + d] * q_nope[(i * kHeads + h) * kNope + d];
        dst[r] = static_cast<float>(acc);
      }
      for (int d = 0; d < kRope; ++d) dst[kRank + d] = q_rope[(i * kHeads + h) * kRope + d];
    }
  }
  const std::vector<float> latent_out = run(mla, kTokens, q_abs, latent, {});
  for (int i = 0; i < kTokens; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      for (int d = 0; d < kDv; ++d) {
        double got = 0;
        for (int r = 0; r < kRank; ++r) got += latent_out[(i * kHeads + h) * kRank + r] * w_uv[(h * kRank + r) * kDv + d];
        EXPECT_NEAR(got, want[(i * kHeads + h) * kDv + d], 1e-5) << i << " " << h << " " << d;
      }
    }
  }
}

}  // namespace
}  // namespace attnkit
