// User-defined variants in `reference`, on cases computed by hand (ALiBi, a document mask, both
// with the soft-cap), and their refusals: a backend without them, a bad expression, a mask that
// reads the score.
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/registry.h"
#include "harness/device_copy.h"

namespace attnkit {
namespace {

// One request of three new tokens, one head of dim 1, scale 1, causal, f32: the last row's output.
float last_row(const AttentionSpec& spec, const std::vector<float>& q, const std::vector<float>& k,
               const std::vector<float>& v) {
  ModelSpec model;
  model.name = "variants";
  model.layers = {spec};
  KvCacheConfig c = KvCacheConfig::for_spec(spec);
  c.num_pages = 4;
  c.page_size = 2;
  c.dtype = DType::f32;
  KvCache cache(c);
  const ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 3, .custom_mask = {}}});
  auto backend = create_backend("reference", {&model, &cache});
  std::vector<float> out(3, NAN);
  backend->init_forward_metadata(b);
  auto view = [](const std::vector<float>& x) {
    return TensorView(const_cast<float*>(x.data()), DType::f32, Device::cpu, {3, 1, 1});
  };
  backend->forward(0, view(q), view(k), view(v), TensorView(out.data(), DType::f32, Device::cpu, {3, 1, 1}));
  return out[2];
}

AttentionSpec one_head() {
  AttentionSpec s;
  s.num_qo_heads = s.num_kv_heads = 1;
  s.head_dim_qk = s.head_dim_vo = 1;
  s.sm_scale = 1.0f;
  return s;
}

const std::vector<float> kQ = {1, 1, 1}, kK = {1, 1, 1}, kV = {0, 1, 2};

TEST(ReferenceVariants, AlibiByHand) {
  AttentionSpec s = one_head();
  s.score_mod = "score - 0.5f * (q_pos - kv_pos)";
  // Row 2 scores 1 - 0.5 * (2, 1, 0) = (0, 0.5, 1).
  const double e1 = std::exp(0.5), e2 = std::exp(1.0);
  EXPECT_NEAR(last_row(s, kQ, kK, kV), (e1 + 2 * e2) / (1 + e1 + e2), 1e-6);
}

TEST(ReferenceVariants, MaskOnTopOfCausalByHand) {
  AttentionSpec s = one_head();
  s.mask_mod = "kv_pos != 1";
  // Row 2 sees keys 0 and 2, equal scores: (0 + 2) / 2.
  EXPECT_NEAR(last_row(s, kQ, kK, kV), 1.0, 1e-6);
  s.mask_mod = "kv_pos / 2 == q_pos / 2";  // documents of two tokens: row 2 starts its own
  EXPECT_NEAR(last_row(s, kQ, kK, kV), 2.0, 1e-6);
}

TEST(ReferenceVariants, ScoreModComesAfterTheSoftCap) {
  AttentionSpec s = one_head();
  s.logits_soft_cap = 1.0f;
  s.score_mod = "score * 2.0f";
  const std::vector<float> k = {3, 0, 0};  // scores of row 2: (3, 0, 0) -> capped tanh(3), then doubled
  const double w = std::exp(2.0 * std::tanh(3.0));
  EXPECT_NEAR(last_row(s, kQ, k, kV), (0 * w + 1 + 2) / (w + 2), 1e-5);
}

TEST(ReferenceVariants, RefusedWhereNotRun) {
  AttentionSpec s = AttentionSpec::dense(4, 2, 64);
  s.score_mod = "score - 0.1f * (q_pos - kv_pos)";
  KvCacheConfig c = KvCacheConfig::for_spec(s);
  EXPECT_EQ(why_unsupported(Registry::global().get("cpu").capabilities(), s, c),
            "score_mod is not supported ('score - 0.1f * (q_pos - kv_pos)')");
  EXPECT_EQ(why_unsupported(Registry::global().get("reference").capabilities(), s, c), "");
  s.score_mod.clear();
  s.mask_mod = "kv_pos < 16 || kv_pos <= q_pos";
  EXPECT_EQ(why_unsupported(Registry::global().get("cpu").capabilities(), s, c),
            "mask_mod is not supported ('kv_pos < 16 || kv_pos <= q_pos')");
}

TEST(ReferenceVariants, SpecValidationParsesThem) {
  AttentionSpec s = AttentionSpec::dense(4, 2, 64);
  s.mask_mod = "score > 0";
  try {
    s.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "spec: mask_mod decides which keys are visible before any score exists, so it cannot read "
                           "score: 'score > 0'");
  }
  s.mask_mod.clear();
  s.score_mod = "score +";
  try {
    s.validate();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "spec: score_mod: expected an operand, the expression ends at column 8 of 'score +'");
  }
}

}  // namespace
}  // namespace attnkit
