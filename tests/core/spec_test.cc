// AttentionSpec checks and the presets' numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/error.h"
#include "attnkit/spec.h"

namespace attnkit {
namespace {

TEST(Spec, PresetsCarryTheModelsNumbers) {
  const ModelSpec llama = make_preset("llama3-8b");
  EXPECT_EQ(llama.num_layers(), 32);
  EXPECT_EQ(llama.layer(0).num_qo_heads, 32);
  EXPECT_EQ(llama.layer(0).num_kv_heads, 8);
  EXPECT_EQ(llama.layer(0).kind(), AttentionKind::gqa);
  EXPECT_FLOAT_EQ(llama.layer(0).scale(), 1.0f / std::sqrt(128.0f));
  EXPECT_EQ(make_preset("llama3-70b").layer(0).num_qo_heads, 64);
  EXPECT_EQ(make_preset("qwen3-0.6b").layer(0).num_qo_heads, 16);
  const ModelSpec gemma = make_preset("gemma2-9b");
  EXPECT_EQ(gemma.layer(0).head_dim_qk, 256);
  EXPECT_EQ(gemma.layer(0).logits_soft_cap, 50.0f);
  EXPECT_EQ(gemma.layer(0).window_left, 4095);
  EXPECT_EQ(gemma.layer(1).window_left, -1);
  const ModelSpec ds = make_preset("deepseek-v3");
  EXPECT_EQ(ds.layer(0).kind(), AttentionKind::mla);
  EXPECT_EQ(ds.layer(0).head_dim_qk, 576);
  EXPECT_EQ(ds.layer(0).head_dim_vo, 512);
  EXPECT_EQ(make_preset("gpt-oss-20b").layer(3).sinks.size(), 64u);
  for (const auto& name : preset_names()) {
    for (const auto& layer : make_preset(name).layers) EXPECT_NO_THROW(layer.validate()) << name;
  }
}

TEST(Spec, LayerCountOverride) {
  const ModelSpec g = make_preset("gemma2-9b", 3);
  EXPECT_EQ(g.num_layers(), 3);
  EXPECT_EQ(g.layer(2).window_left, 4095);
}

TEST(Spec, UnknownPresetListsTheKnownOnes) {
  try {
    make_preset("gpt5");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "preset must be one of llama3-8b, llama3-70b, qwen3-0.6b, gemma2-9b, gpt-oss-20b, deepseek-v3, got 'gpt5'");
  }
}

TEST(Spec, HeadsThatDoNotDivide) {
  AttentionSpec s;
  s.num_qo_heads = 12;
  s.num_kv_heads = 5;
  s.head_dim_qk = s.head_dim_vo = 64;
  try {
    s.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "spec: num_qo_heads (12) must be a multiple of num_kv_heads (5)");
  }
}

TEST(Spec, SinksNeedOneValuePerHead) {
  AttentionSpec s;
  s.num_qo_heads = 4;
  s.num_kv_heads = 2;
  s.head_dim_qk = s.head_dim_vo = 64;
  s.sinks = {1.0f};
  EXPECT_THROW(s.validate(), Error);
}

}  // namespace
}  // namespace attnkit
