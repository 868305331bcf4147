// The `planned` extend kernel, launched directly over a CUDA cache and compared with the reference
// formula on the host copy: ragged and chunked batches, masks, soft-cap, sinks, e4m3, KV splits.
// Backend-level conformance (through the adapter) is the harness's job; timing is `attnkit bench`'s.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/kv_cache.h"
#include "backends/planned/kernels/prefill.h"
#include "backends/planned/prefill_testing.h"
#include "backends/reference/kernels/attention.h"
#include "cuda/memory.h"
#include "gpu_test.h"
#include "harness/check.h"
#include "harness/device_copy.h"
#include "param_name.h"

namespace attnkit::planned::prefill_testing {
// GoogleTest prints a case by its label (not as a byte dump).
void PrintTo(const PrefillCase& c, std::ostream* os) { *os << c.label; }
}  // namespace attnkit::planned::prefill_testing

namespace attnkit::planned {
namespace {

using prefill_testing::LaunchInputs;
using prefill_testing::make_setup;
using prefill_testing::make_work;
using prefill_testing::PrefillCase;
using prefill_testing::upload;

void run_case(const PrefillCase& c, uint64_t seed) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  SCOPED_TRACE(c.label);
  LaunchInputs s;
  make_setup(c, seed, s);
  const ForwardBatch& b = s.batch;
  const int64_t rows = int64_t{b.num_tokens()} * c.num_qo_heads;
  const int d = c.head_dim;

  std::vector<int> split_base;
  int num_partial_rows = 0;
  const std::vector<PrefillWorkItem> work = make_work(c, s, split_base, num_partial_rows);
  Buffer g_work = upload(work);
  Buffer g_out(Device::cuda, std::max<size_t>(1, rows * d * dtype_size(c.q_dtype)));
  Buffer g_lse(Device::cuda, std::max<size_t>(1, rows * sizeof(float)));
  Buffer g_po(Device::cuda, std::max<size_t>(1, size_t(num_partial_rows) * c.num_qo_heads * d * sizeof(float)));
  Buffer g_plse(Device::cuda, std::max<size_t>(1, size_t(num_partial_rows) * c.num_qo_heads * sizeof(float)));
  for (Buffer* buf : {&g_out, &g_lse, &g_po, &g_plse}) buf->fill_bytes(0xff);  // NaN: unwritten shows
  PrefillParams p = s.params;
  p.work = static_cast<const PrefillWorkItem*>(g_work.data());
  p.num_work_items = static_cast<int>(work.size());
  p.out = g_out.data();
  p.lse = static_cast<float*>(g_lse.data());
  if (num_partial_rows > 0) {
    p.partial_o = static_cast<float*>(g_po.data());
    p.partial_lse = static_cast<float*>(g_plse.data());
  }
  launch_prefill(p, nullptr);
  cuda::device_synchronize();

  // The kernel's answer, as floats; splits merged here with the sink in the denominator.
  std::vector<float> out(static_cast<size_t>(rows * d)), lse(static_cast<size_t>(rows));
  if (num_partial_rows == 0) {
    std::vector<uint8_t> raw(static_cast<size_t>(rows * d) * dtype_size(c.q_dtype));
    g_out.copy_to_host(raw.data(), raw.size());
    for (int64_t e = 0; e < rows * d; ++e) out[size_t(e)] = load_as_float(raw.data(), c.q_dtype, e);
    g_lse.copy_to_host(lse.data(), lse.size() * sizeof(float));
  } else {
    std::vector<float> po(size_t(num_partial_rows) * c.num_qo_heads * d), plse(size_t(num_partial_rows) * c.num_qo_heads);
    g_po.copy_to_host(po.data(), po.size() * sizeof(float));
    g_plse.copy_to_host(plse.data(), plse.size() * sizeof(float));
    for (int i = 0; i < b.batch_size(); ++i) {
      for (int j = 0; j < b.qo_len(i); ++j) {
        for (int h = 0; h < c.num_qo_heads; ++h) {
          auto prow = [&](int k) { return (size_t(split_base[size_t(i)] + k * b.qo_len(i) + j)) * c.num_qo_heads + h; };
          double m = -std::numeric_limits<double>::infinity();
          for (int k = 0; k < c.kv_splits; ++k) m = std::max(m, double{plse[prow(k)]});
          const size_t orow = size_t(b.qo_indptr[size_t(i)] + j) * c.num_qo_heads + h;
          std::vector<double> acc(size_t(d), 0.0);
          double denom = 0.0;
          if (std::isfinite(m)) {
            for (int k = 0; k < c.kv_splits; ++k) {
              const double wgt = std::exp(double{plse[prow(k)]} - m);
              denom += wgt;
              for (int e = 0; e < d; ++e) acc[size_t(e)] += wgt * po[prow(k) * d + e];
            }
          }
          lse[orow] = std::isfinite(m) ? float(m + std::log(denom)) : -std::numeric_limits<float>::infinity();
          double total = denom;
          if (!s.spec.sinks.empty() && std::isfinite(m)) total += std::exp(double{s.spec.sinks[size_t(h)]} - m);
          for (int e = 0; e < d; ++e) out[orow * d + e] = total > 0.0 ? float(acc[size_t(e)] / total) : 0.0f;
        }
      }
    }
  }

  KvCacheConfig host_cfg = s.cfg;
  host_cfg.device = Device::cpu;
  std::vector<float> ref(out.size()), ref_lse(lse.size());
  reference::AttentionParams rp;
  rp.spec = &s.spec;
  rp.cache = &host_cfg;
  rp.k_pool = s.k_host.data();
  rp.v_pool = s.v_host.data();
  rp.batch = &b;
  rp.q = s.q_host.data();
  rp.q_dtype = c.q_dtype;
  rp.out = ref.data();
  rp.out_dtype = DType::f32;
  rp.lse = ref_lse.data();
  reference::attention(rp);

  double max_ref = 0.0, worst = -1.0;
  size_t worst_idx = 0;
  for (size_t e = 0; e < out.size(); ++e) {
    max_ref = std::max(max_ref, std::fabs(double{ref[e]}));
    const double err = std::isfinite(out[e]) ? std::fabs(double{out[e]} - ref[e]) : std::numeric_limits<double>::infinity();
    if (err > worst) worst = err, worst_idx = e;
  }
  const double tol = harness::default_tolerance(c.q_dtype, c.kv_dtype);
  if (!out.empty()) {
    EXPECT_LE(worst / std::max(max_ref, 1e-6), tol)
        << "worst element " << worst_idx << " (token " << worst_idx / d / c.num_qo_heads << ", head "
        << worst_idx / d % c.num_qo_heads << ", dim " << worst_idx % d << "): got " << out[worst_idx] << ", reference "
        << ref[worst_idx] << "; max |ref| " << max_ref;
  }
  for (size_t r = 0; r < lse.size(); ++r) {
    if (std::isinf(ref_lse[r])) {
      ASSERT_TRUE(std::isinf(lse[r]) && lse[r] < 0) << "lse row " << r << ": got " << lse[r] << ", reference -inf";
    } else {
      ASSERT_NEAR(lse[r], ref_lse[r], 2e-3 * (1.0 + std::fabs(ref_lse[r]))) << "lse row " << r;
    }
  }
}

std::vector<PrefillCase> cases() {
  std::vector<PrefillCase> v;
  auto add = [&](PrefillCase c) { v.push_back(std::move(c)); };
  add({.label = "gqa4 d128 causal ragged, partial pages",
       .requests = {{0, 1}, {0, 37}, {5, 200}, {300, 64}, {17, 0}, {0, 129}}});
  add({.label = "mha d64 f16 page 1", .num_qo_heads = 4, .num_kv_heads = 4, .head_dim = 64,
       .q_dtype = DType::f16, .kv_dtype = DType::f16, .page_size = 1, .requests = {{3, 50}, {0, 1}, {90, 7}}});
  add({.label = "mqa8 d256 page 256", .num_qo_heads = 8, .num_kv_heads = 1, .head_dim = 256, .page_size = 256,
       .requests = {{0, 70}, {400, 33}}});
  add({.label = "gqa4 d128 non-causal", .page_size = 7, .requests = {{10, 90}, {0, 1}, {64, 64}}, .causal = false});
  add({.label = "gqa4 d128 window 20", .requests = {{100, 80}, {0, 45}}, .window_left = 20});
  add({.label = "gqa2 d64 non-causal window 0", .num_qo_heads = 4, .num_kv_heads = 2, .head_dim = 64,
       .requests = {{5, 40}}, .causal = false, .window_left = 0});
  add({.label = "gqa4 d128 soft-cap and sinks", .requests = {{30, 70}, {0, 3}}, .soft_cap = 1.5f, .sinks = true});
  add({.label = "gqa4 d128 custom mask", .page_size = 5, .requests = {{12, 30}, {0, 19}, {70, 1}}, .custom_mask = true});
  add({.label = "gqa4 d128 e4m3 cache, bf16", .kv_dtype = DType::e4m3, .requests = {{40, 60}, {0, 9}},
       .k_scale = 0.5f, .v_scale = 2.0f});
  add({.label = "gqa8 d64 e4m3 cache, f16", .num_qo_heads = 16, .num_kv_heads = 2, .head_dim = 64,
       .q_dtype = DType::f16, .kv_dtype = DType::e4m3, .page_size = 3, .requests = {{20, 33}}, .k_scale = 1.5f,
       .v_scale = 0.25f});
  add({.label = "gqa4 d128 chunked prefill, 3 KV splits, sinks", .requests = {{700, 90}, {0, 130}, {33, 1}},
       .sinks = true, .kv_splits = 3});
  add({.label = "gqa4 d256 f16 e4m3 window, 2 KV splits", .head_dim = 256, .q_dtype = DType::f16,
       .kv_dtype = DType::e4m3, .page_size = 32, .requests = {{200, 40}}, .window_left = 100, .kv_splits = 2});
  add({.label = "gqa4 d128 long chunk", .requests = {{1000, 300}}});
  add({.label = "gqa4 d128 bf16 q, f16 cache", .kv_dtype = DType::f16, .requests = {{40, 90}, {0, 20}}});
  add({.label = "gqa2 d64 f16 q, bf16 cache, window", .num_qo_heads = 4, .num_kv_heads = 2, .head_dim = 64,
       .q_dtype = DType::f16, .kv_dtype = DType::bf16, .requests = {{60, 50}}, .window_left = 30});
  add({.label = "gqa4 d128 f16 ragged", .q_dtype = DType::f16, .kv_dtype = DType::f16, .page_size = 8,
       .requests = {{20, 150}, {0, 77}, {5, 1}}});
  add({.label = "gqa8 d128 f16 e4m3 cache, soft-cap, 2 KV splits", .num_qo_heads = 16, .num_kv_heads = 2,
       .q_dtype = DType::f16, .kv_dtype = DType::e4m3, .requests = {{300, 70}}, .soft_cap = 2.0f, .k_scale = 0.75f,
       .v_scale = 1.25f, .kv_splits = 2});
  return v;
}

class PlannedPrefill : public ::testing::TestWithParam<PrefillCase> {};

TEST_P(PlannedPrefill, MatchesReference) { run_case(GetParam(), 7); }
TEST_P(PlannedPrefill, MatchesReferenceOnOtherInputs) { run_case(GetParam(), 1234); }

INSTANTIATE_TEST_SUITE_P(Cases, PlannedPrefill, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return attnkit::testing::param_name(info.param.label); });

// Through the backend (plan, cache store, extend kernel): the harness's extend and mixed cases and
// a few longer ones, against `reference` on fresh inputs.
TEST(PlannedPrefillBackend, ExtendAndMixedCasesMatchReference) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  std::vector<harness::CheckCase> checks;
  for (const harness::CheckCase& c : harness::standard_cases()) {
    if (std::any_of(c.requests.begin(), c.requests.end(), [](const auto& r) { return r.second > 1; }))
      checks.push_back(c);
  }
  harness::CheckCase chunked;
  chunked.label = "chunked prefill, llama3-8b heads";
  chunked.spec.num_qo_heads = 32;
  chunked.spec.num_kv_heads = 8;
  chunked.spec.head_dim_qk = chunked.spec.head_dim_vo = 128;
  chunked.requests = {{700, 300}, {0, 45}, {129, 1}};
  checks.push_back(chunked);
  chunked.label = "chunked prefill, head dim 64, f16, page 1";
  chunked.spec.head_dim_qk = chunked.spec.head_dim_vo = 64;
  chunked.q_dtype = chunked.kv_dtype = DType::f16;
  chunked.page_size = 1;
  checks.push_back(chunked);
  int ran = 0;
  for (const harness::CheckCase& c : checks) {
    const harness::CheckResult r = harness::run_check("planned", c);
    if (!r.skipped.empty()) continue;
    ++ran;
    EXPECT_TRUE(r.passed) << harness::describe(c) << ": " << r.message;
  }
  EXPECT_GT(ran, 0) << "the planned backend skipped every extend case";
}

TEST(PlannedPrefillParams, RefusesUnsupportedShapes) {
  PrefillParams p;
  p.num_qo_heads = 8;
  p.num_kv_heads = 2;
  p.page_size = 16;
  p.sm_scale = 0.1f;
  p.head_dim_qk = 96;
  try {
    check_prefill_params(p);
    FAIL() << "head_dim 96 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "planned prefill: head_dim must be 64, 128 or 256, got 96");
  }
  p.head_dim_qk = 128;
  p.kv_dtype = DType::f32;
  try {
    check_prefill_params(p);
    FAIL() << "an f32 cache was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "planned prefill: cache dtype must be f16, bf16 or e4m3, got f32");
  }
  EXPECT_EQ(prefill_tile_rows(128) % 16, 0);
}

}  // namespace
}  // namespace attnkit::planned
