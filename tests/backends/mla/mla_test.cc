// The `mla` backend against `reference` on DeepSeek's absorbed shape (576 / 512) through the
// harness (fresh random inputs, poisoned outputs, every element compared): 16 and 128 heads,
// decode, speculative verification (2 and 4 new tokens), extend with a prefix, the page sizes it
// serves, splits, on the bf16 and the fp8_blocked cache (`reference` reads the same e4m3 slots,
// so the bound is q's bf16 one; the kernels round each dequantised value to bf16 once more); and the refusals.
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/registry.h"
#include "gpu_test.h"
#include "harness/check.h"
#include "param_name.h"

namespace attnkit {
namespace {

harness::CheckCase deepseek_case(const std::string& label, int heads, int page_size,
                                 std::vector<std::pair<int64_t, int64_t>> requests, bool fp8 = false) {
  harness::CheckCase c;
  c.label = fp8 ? "fp8 " + label : label;
  c.spec = AttentionSpec::mla(heads, 512, 64, 1.0f / std::sqrt(192.0f));
  c.page_size = page_size;
  c.requests = std::move(requests);
  if (fp8) {
    c.kv_dtype = DType::e4m3;
    c.latent_format = LatentFormat::fp8_blocked;
  }
  return c;
}

std::vector<harness::CheckCase> cases() {
  return {
      deepseek_case("16 heads decode page 64", 16, 64, {{700, 1}, {3, 1}, {130, 1}, {64, 1}}),
      deepseek_case("16 heads decode page 16", 16, 16, {{517, 1}, {0, 1}, {33, 1}}),
      deepseek_case("16 heads decode page 8", 16, 8, {{100, 1}, {9, 1}}),
      deepseek_case("16 heads decode page 128", 16, 128, {{300, 1}, {127, 1}}),
      deepseek_case("16 heads decode page 256", 16, 256, {{600, 1}, {255, 1}}),
      deepseek_case("128 heads decode", 128, 64, {{333, 1}, {64, 1}}),
      deepseek_case("16 heads verify 2", 16, 64, {{200, 2}, {77, 2}}),
      deepseek_case("16 heads verify 4", 16, 64, {{190, 4}, {1, 4}}),
      deepseek_case("128 heads verify 2", 128, 32, {{150, 2}}),
      deepseek_case("16 heads extend with prefix", 16, 64, {{70, 30}, {0, 45}}),
      deepseek_case("128 heads extend", 128, 64, {{0, 20}, {40, 7}}),
      deepseek_case("mixed", 16, 64, {{100, 1}, {0, 30}, {250, 1}}),
      deepseek_case("long history, split", 16, 64, {{6000, 1}}),
      // The fp8_blocked cache: 16-row tiles where requests have 16 rows, else 32.
      deepseek_case("16 heads decode page 64", 16, 64, {{700, 1}, {3, 1}, {130, 1}, {64, 1}}, true),
      deepseek_case("16 heads decode page 8", 16, 8, {{100, 1}, {9, 1}}, true),
      deepseek_case("16 heads decode page 256", 16, 256, {{600, 1}, {255, 1}}, true),
      deepseek_case("128 heads decode", 128, 64, {{333, 1}, {64, 1}}, true),
      deepseek_case("16 heads verify 2", 16, 32, {{200, 2}, {77, 2}}, true),
      deepseek_case("16 heads extend with prefix", 16, 64, {{70, 30}, {0, 45}}, true),
      deepseek_case("mixed", 16, 16, {{100, 1}, {0, 30}, {250, 1}}, true),
      deepseek_case("long history, split", 16, 64, {{6000, 1}}, true),
  };
}

class MlaConformance : public ::testing::TestWithParam<int> {};

TEST_P(MlaConformance, MatchesReference) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::string why = Registry::global().get("mla").why_unavailable();
  if (!why.empty()) GTEST_SKIP() << "mla: " << why;
  const harness::CheckCase c = cases()[static_cast<size_t>(GetParam())];
  const harness::CheckResult r = harness::run_check("mla", c);
  ASSERT_TRUE(r.skipped.empty()) << r.skipped;
  EXPECT_TRUE(r.passed) << harness::describe(c) << ": rel error " << r.rel_err << " > " << r.tolerance << "; "
                        << r.message;
}

INSTANTIATE_TEST_SUITE_P(DeepSeek, MlaConformance, ::testing::Range(0, static_cast<int>(cases().size())),
                         [](const auto& info) {
                           return attnkit::testing::param_name(cases()[static_cast<size_t>(info.param)].label);
                         });

TEST(MlaSupport, RefusesPageSizesItsTilesCannotLoad) {
  const Capabilities caps = Registry::global().get("mla").capabilities();
  const AttentionSpec spec = AttentionSpec::mla(16, 512, 64, 0.1f);
  KvCacheConfig cfg = KvCacheConfig::for_spec(spec);
  cfg.device = Device::cuda;
  cfg.page_size = 1;
  EXPECT_EQ(why_unsupported(caps, spec, cfg), "page_size must be in 8..256, got 1");
  cfg.page_size = 48;
  EXPECT_EQ(why_unsupported(caps, spec, cfg), "page_size must be one of 8, 16, 32, 64, 128, 256, got 48");
  cfg.page_size = 64;
  EXPECT_EQ(why_unsupported(caps, spec, cfg), "");
  EXPECT_EQ(why_unsupported(caps, AttentionSpec::mla(16, 64, 16, 0.1f), cfg), "MLA kv_lora_rank must be one of 512, got 64");
  EXPECT_EQ(why_unsupported(caps, AttentionSpec::mla(16, 512, 32, 0.1f), cfg),
            "MLA qk_rope_head_dim must be one of 64, got 32");
  EXPECT_EQ(why_unsupported(caps, AttentionSpec::dense(8, 8, 128), KvCacheConfig::for_spec(AttentionSpec::dense(8, 8, 128))),
            "runs on cuda, the cache is on cpu");
  cfg.dtype = DType::e4m3;  // with one k_scale: refused; in blocks with their scales: served
  EXPECT_EQ(why_unsupported(caps, spec, cfg),
            "an e4m3 latent cache must be LatentFormat::fp8_blocked here (per-block scales), not plain with one k_scale");
  cfg.latent_format = LatentFormat::fp8_blocked;
  EXPECT_EQ(why_unsupported(caps, spec, cfg), "");
}

}  // namespace
}  // namespace attnkit
