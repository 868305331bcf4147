// Every registered backend against `reference` over one table of cases (harness/cases.cc), plus
// random cases on each preset's heads, plus an unsupported shape that must be refused clearly.
#include <gtest/gtest.h>

#include "attnkit/registry.h"
#include "gpu_test.h"
#include "harness/check.h"
#include "param_name.h"

namespace attnkit {
namespace {

std::vector<std::string> backends_under_test() {
  std::vector<std::string> names;
  for (const auto& b : Registry::global().all()) {
    if (b.name != "reference") names.push_back(b.name);
  }
  if (names.empty()) names.push_back("reference");  // keeps the suite meaningful in a minimal build
  return names;
}

bool runs_on_gpu(const std::string& backend) { return Registry::global().get(backend).device == Device::cuda; }

void expect_passes(const std::string& backend, const harness::CheckCase& c) {
  const harness::CheckResult r = harness::run_check(backend, c);
  if (!r.skipped.empty()) {
    GTEST_SKIP() << backend << " skips " << harness::describe(c) << ": " << r.skipped;
  }
  EXPECT_TRUE(r.passed) << backend << " on " << harness::describe(c) << ": rel error " << r.rel_err << " > "
                        << r.tolerance << "; " << r.message;
}

class Conformance : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(Conformance, StandardCase) {
  const auto& [backend, index] = GetParam();
  if (runs_on_gpu(backend)) ATTNKIT_SKIP_WITHOUT_GPU();
  expect_passes(backend, harness::standard_cases()[static_cast<size_t>(index)]);
}

INSTANTIATE_TEST_SUITE_P(
    AllBackends, Conformance,
    ::testing::Combine(::testing::ValuesIn(backends_under_test()),
                       ::testing::Range(0, static_cast<int>(harness::standard_cases().size()))),
    [](const auto& info) {
      const int i = std::get<1>(info.param);
      return attnkit::testing::param_name(std::get<0>(info.param) + " " + std::to_string(i) + " " +
                                          harness::standard_cases()[static_cast<size_t>(i)].label);
    });

// Why `info`'s backend takes none of `model`'s layers (MLA where it has none), or empty.
std::string why_no_layer_runs(const BackendInfo& info, const ModelSpec& model) {
  const Capabilities caps = info.capabilities();
  std::string why;
  for (const AttentionSpec& layer : model.layers) {
    KvCacheConfig cfg = KvCacheConfig::for_spec(layer);
    cfg.device = caps.device;
    why = why_unsupported(caps, layer, cfg);
    if (why.empty()) break;
  }
  return why;
}

class RandomConformance : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(RandomConformance, PresetHeads) {
  const auto& [backend, preset] = GetParam();
  if (runs_on_gpu(backend)) ATTNKIT_SKIP_WITHOUT_GPU();
  const BackendInfo& info = Registry::global().get(backend);
  const ModelSpec model = make_preset(preset);
  const std::string refused = why_no_layer_runs(info, model);
  if (!refused.empty()) GTEST_SKIP() << backend << " takes no layer of " << preset << ": " << refused;
  int ran = 0;
  for (const auto& c : harness::random_cases(model, info.capabilities(), 3, 42)) {
    const harness::CheckResult r = harness::run_check(backend, c);
    if (!r.skipped.empty()) continue;
    ++ran;
    EXPECT_TRUE(r.passed) << backend << " on " << harness::describe(c) << ": rel error " << r.rel_err << " > "
                          << r.tolerance << "; " << r.message;
  }
  EXPECT_GT(ran, 0) << backend << " skipped every random case on " << preset << "'s heads";
}

INSTANTIATE_TEST_SUITE_P(AllBackends, RandomConformance,
                         ::testing::Combine(::testing::ValuesIn(backends_under_test()),
                                            ::testing::Values("llama3-8b", "gemma2-9b", "gpt-oss-20b", "deepseek-v3")),
                         [](const auto& info) {
                           return attnkit::testing::param_name(std::get<0>(info.param) + " " + std::get<1>(info.param));
                         });

class Refusal : public ::testing::TestWithParam<std::string> {};

// head_dim 96 with page size 1: a backend either computes it right or refuses it before any work,
// with a message that starts with its name.
TEST_P(Refusal, UnsupportedShapeIsRefusedClearly) {
  const std::string& backend = GetParam();
  if (runs_on_gpu(backend)) ATTNKIT_SKIP_WITHOUT_GPU();
  harness::CheckCase c;
  c.spec.num_qo_heads = 4;
  c.spec.num_kv_heads = 2;
  c.spec.head_dim_qk = c.spec.head_dim_vo = 96;
  c.page_size = 1;
  c.requests = {{10, 3}};
  const BackendInfo& info = Registry::global().get(backend);
  KvCacheConfig cfg;
  cfg.num_pages = 16;
  cfg.page_size = 1;
  cfg.num_kv_heads = 2;
  cfg.head_dim_k = cfg.head_dim_v = 96;
  cfg.device = info.device;
  const std::string why = why_unsupported(info.capabilities(), c.spec, cfg);
  if (why.empty()) {
    expect_passes(backend, c);
    return;
  }
  ModelSpec model;
  model.name = "refusal";
  model.layers = {c.spec};
  KvCache cache(cfg);
  const ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 10, .num_new_tokens = 3, .custom_mask = {}}});
  auto dut = create_backend(backend, {&model, &cache});
  try {
    dut->init_forward_metadata(b);
    FAIL() << backend << " accepted a shape it says it does not support: " << why;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), backend + ": " + why + " (layer 0)");
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, Refusal, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return attnkit::testing::param_name(info.param); });

}  // namespace
}  // namespace attnkit
