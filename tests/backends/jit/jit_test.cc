// The `jit` backend against `reference` through the harness (fresh random inputs, poisoned
// outputs, every element compared): the head dims the ahead-of-time backends lack, qk and vo
// apart, GQA and MQA, page sizes, mixed dtypes, and the user variants (ALiBi, a document mask,
// a prefix-LM mask, soft-cap through score_mod) on decode, extend and mixed batches.
#include <gtest/gtest.h>

#include "attnkit/registry.h"
#include "gpu_test.h"
#include "harness/check.h"
#include "param_name.h"

namespace attnkit {
namespace {

harness::CheckCase jit_case(const std::string& label, int q, int kv, int dk, int dv, int page,
                            std::vector<std::pair<int64_t, int64_t>> requests, std::string score_mod = "",
                            std::string mask_mod = "") {
  harness::CheckCase c;
  c.label = label;
  c.spec = AttentionSpec::dense(q, kv, dk);
  c.spec.head_dim_vo = dv;
  c.spec.score_mod = std::move(score_mod);
  c.spec.mask_mod = std::move(mask_mod);
  c.page_size = page;
  c.requests = std::move(requests);
  return c;
}

std::vector<harness::CheckCase> cases() {
  const std::string alibi = "score - exp2f(-(head + 1) * 0.5f) * (q_pos - kv_pos)";
  std::vector<harness::CheckCase> c = {
      jit_case("d128 gqa decode", 32, 8, 128, 128, 16, {{700, 1}, {3, 1}, {130, 1}}),
      jit_case("d128 extend with prefix", 32, 8, 128, 128, 16, {{70, 30}, {0, 45}}),
      jit_case("d96 mixed", 12, 4, 96, 96, 1, {{100, 1}, {0, 30}, {250, 1}}),
      jit_case("d192 by 128 extend", 16, 16, 192, 128, 64, {{40, 20}, {0, 9}}),
      jit_case("d256 mqa decode", 8, 1, 256, 256, 256, {{1000, 1}, {17, 1}}),
      jit_case("d64 alibi mixed", 8, 2, 64, 64, 16, {{120, 1}, {0, 40}}, alibi),
      jit_case("d128 document mask extend", 8, 2, 128, 128, 16, {{0, 90}, {64, 30}}, "", "kv_pos / 32 == q_pos / 32"),
      jit_case("d128 prefix-lm", 8, 8, 128, 128, 16, {{0, 50}}, "", "kv_pos < 16 || kv_pos <= q_pos"),
      jit_case("d128 soft-cap as score_mod", 8, 2, 128, 128, 2, {{300, 1}, {10, 12}}, "20.0f * tanhf(score / 20.0f)"),
  };
  c[7].spec.causal = false;  // the prefix-LM mask decides alone
  c[2].q_dtype = DType::f16;
  c[2].kv_dtype = DType::bf16;
  return c;
}

class JitConformance : public ::testing::TestWithParam<int> {};

TEST_P(JitConformance, MatchesReference) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const std::string why = Registry::global().get("jit").why_unavailable();
  if (!why.empty()) GTEST_SKIP() << "jit: " << why;
  const harness::CheckCase c = cases()[static_cast<size_t>(GetParam())];
  const harness::CheckResult r = harness::run_check("jit", c);
  ASSERT_TRUE(r.skipped.empty()) << r.skipped;
  EXPECT_TRUE(r.passed) << harness::describe(c) << ": rel error " << r.rel_err << " > " << r.tolerance << "; "
                        << r.message;
}

INSTANTIATE_TEST_SUITE_P(Shapes, JitConformance, ::testing::Range(0, static_cast<int>(cases().size())),
                         [](const auto& info) {
                           return attnkit::testing::param_name(cases()[static_cast<size_t>(info.param)].label);
                         });

}  // namespace
}  // namespace attnkit
