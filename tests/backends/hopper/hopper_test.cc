// The `hopper` backend against `reference` through the whole path (plan, cache store, the extend
// kernel, planned's decode kernel) on fresh random inputs with poisoned outputs, every element
// checked (harness::run_check); and its support checks, which need no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "backends/hopper/config.h"
#include "backends/hopper/kernels/extend.h"
#include "gpu_test.h"
#include "harness/check.h"
#include "param_name.h"

namespace attnkit {
namespace {

harness::CheckCase make_case(std::string label, int qo_heads, int kv_heads, int head_dim, int page_size,
                             std::vector<std::pair<int64_t, int64_t>> requests) {
  harness::CheckCase c;
  c.label = std::move(label);
  c.spec.num_qo_heads = qo_heads;
  c.spec.num_kv_heads = kv_heads;
  c.spec.head_dim_qk = c.spec.head_dim_vo = head_dim;
  c.page_size = page_size;
  c.requests = std::move(requests);
  return c;
}

std::vector<harness::CheckCase> cases() {
  std::vector<harness::CheckCase> out;
  // Lengths that end mid-tile and mid-page, several tiles a request, more work than SMs.
  const std::vector<std::pair<int64_t, int64_t>> ragged = {{0, 300}, {0, 2}, {517, 129}, {64, 64}, {0, 1000}};
  for (int d : {64, 128, 256}) {
    std::string label = "d";  // appended, not "d" + ...: g++ 12 warns falsely (-Wrestrict) on that
    label += std::to_string(d) + " gqa4 page16 ragged";
    out.push_back(make_case(label, 8, 2, d, 16, ragged));
  }
  out.push_back(make_case("llama3-8b heads page64 chunked", 32, 8, 128, 64, {{1500, 700}, {0, 45}, {129, 1}}));
  out.push_back(make_case("mha page8", 4, 4, 128, 8, {{33, 200}, {0, 17}}));
  out.push_back(make_case("gqa8 page128", 8, 1, 128, 128, {{0, 600}, {200, 3}}));
  out.push_back(make_case("gqa7 (126-row tiles) page32", 28, 4, 128, 32, {{10, 400}, {0, 77}}));
  out.push_back(make_case("page256 long", 8, 2, 128, 256, {{0, 2100}}));
  harness::CheckCase c = make_case("f16 d128 page16", 8, 2, 128, 16, ragged);
  c.q_dtype = c.kv_dtype = DType::f16;
  out.push_back(c);
  c = make_case("f16 d64 page64", 8, 2, 64, 64, {{100, 260}});
  c.q_dtype = c.kv_dtype = DType::f16;
  out.push_back(c);
  c = make_case("non-causal", 8, 2, 128, 16, {{0, 300}, {40, 90}});
  c.spec.causal = false;
  out.push_back(c);
  c = make_case("window 100", 8, 2, 128, 16, {{0, 700}, {300, 64}});
  c.spec.window_left = 100;
  out.push_back(c);
  c = make_case("soft-cap 30", 8, 2, 128, 16, {{0, 300}, {40, 90}});
  c.spec.logits_soft_cap = 30.0f;
  out.push_back(c);
  c = make_case("sinks, d256", 8, 2, 256, 16, {{0, 200}, {70, 70}});
  c.spec.sinks.assign(8, 0.0f);
  for (int h = 0; h < 8; ++h) c.spec.sinks[static_cast<size_t>(h)] = 0.5f * static_cast<float>(h) - 1.0f;
  out.push_back(c);
  c = make_case("mixed extend and decode", 8, 2, 128, 16, {{0, 300}, {500, 1}, {33, 1}, {0, 40}});
  out.push_back(c);
  c = make_case("sequential pages", 8, 2, 128, 64, {{0, 1000}, {300, 300}});
  c.shuffle_pages = false;
  out.push_back(c);
  // Pages under 8 slots: the producer warpgroup gathers K/V rows with cp.async.
  for (int d : {64, 128, 256}) {
    std::string label = "d";
    label += std::to_string(d) + " gqa4 page1 gathered";
    out.push_back(make_case(label, 8, 2, d, 1, ragged));
  }
  out.push_back(make_case("page2 gathered, chunked", 32, 8, 128, 2, {{1500, 700}, {0, 45}, {129, 1}}));
  c = make_case("f16 page4 gathered, window 100", 8, 2, 128, 4, {{0, 700}, {301, 64}});
  c.q_dtype = c.kv_dtype = DType::f16;
  c.spec.window_left = 100;
  out.push_back(c);
  c = make_case("page1 gathered, non-causal, kv_len 1", 8, 8, 128, 1, {{0, 1}, {0, 130}, {1, 5}});
  c.spec.causal = false;
  out.push_back(c);
  // An e4m3 cache, dequantised by the producer warpgroup as rows load, under bf16 and f16 q.
  for (int d : {64, 128, 256}) {
    std::string label = "e4m3 cache d";
    label += std::to_string(d) + " page16 ragged";
    c = make_case(label, 8, 2, d, 16, ragged);
    c.kv_dtype = DType::e4m3;
    c.k_scale = 0.5f;
    c.v_scale = 0.25f;
    out.push_back(c);
  }
  c = make_case("e4m3 cache, f16 q, page1, chunked, soft-cap", 32, 8, 128, 1, {{1500, 700}, {0, 45}});
  c.q_dtype = DType::f16;
  c.kv_dtype = DType::e4m3;
  c.k_scale = 2.0f;
  c.v_scale = 0.125f;
  c.spec.logits_soft_cap = 30.0f;
  out.push_back(c);
  return out;
}

class HopperExtend : public ::testing::TestWithParam<harness::CheckCase> {};

TEST_P(HopperExtend, MatchesReference) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const harness::CheckResult r = harness::run_check("hopper", GetParam());
  if (!r.skipped.empty()) GTEST_SKIP() << r.skipped;
  EXPECT_TRUE(r.passed) << harness::describe(GetParam()) << ": rel error " << r.rel_err << " > " << r.tolerance
                        << "; " << r.message;
}

INSTANTIATE_TEST_SUITE_P(Cases, HopperExtend, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return attnkit::testing::param_name(info.param.label); });

// The cp.async gather asked for where pages would take TMA boxes (`--hopper-kv-load gather`).
TEST(HopperExtendGathered, MatchesReferenceOnPagesBoxesCouldTake) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  BackendOptions options;
  options.hopper_kv_load = BackendOptions::HopperKvLoad::gather;
  for (const harness::CheckCase& c : {make_case("page16", 8, 2, 128, 16, {{0, 300}, {517, 129}, {0, 1000}}),
                                      make_case("d256 page64 chunked", 8, 2, 256, 64, {{1500, 700}, {0, 45}})}) {
    const harness::CheckResult r = harness::run_check("hopper", c, options);
    if (!r.skipped.empty()) GTEST_SKIP() << r.skipped;
    EXPECT_TRUE(r.passed) << harness::describe(c) << ": rel error " << r.rel_err << " > " << r.tolerance << "; "
                          << r.message;
  }
}

// An e4m3 cache multiplied on e4m3 tensor cores (`--hopper-fp8-products`): q is rounded to e4m3 a row
// at a time (scaled so its largest |value| is e4m3's largest) and P to e4m3 (times kPFactor, 16), each a
// relative error of at most e4m3's unit roundoff u = 2^-4 an element, on top of the cache both sides
// read the same. By the rule of default_tolerance (4u of the dtype that rounds), 4 x 2^-4: what the
// harness allows, since the backend reports e4m3 as its products' dtype (products_dtype).
TEST(HopperExtendFp8, MatchesReferenceWithinE4m3Rounding) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  BackendOptions options;
  options.hopper_fp8_products = true;
  std::vector<harness::CheckCase> fp8_cases = {
      make_case("fp8 gqa4 page16 ragged", 8, 2, 128, 16, {{0, 300}, {0, 2}, {517, 129}, {64, 64}, {0, 1000}}),
      make_case("fp8 llama3-8b heads page64 chunked", 32, 8, 128, 64, {{1500, 700}, {0, 45}, {129, 1}}),
      make_case("fp8 mha page8 full", 4, 4, 128, 8, {{33, 200}, {0, 17}}),
      make_case("fp8 soft-cap window page32", 8, 2, 128, 32, {{0, 700}, {300, 64}})};
  fp8_cases[2].spec.causal = false;
  fp8_cases[3].spec.logits_soft_cap = 30.0f;
  fp8_cases[3].spec.window_left = 100;
  for (harness::CheckCase& c : fp8_cases) {
    c.kv_dtype = DType::e4m3;
    c.k_scale = 0.5f;
    c.v_scale = 0.25f;
    const harness::CheckResult r = harness::run_check("hopper", c, options);
    if (!r.skipped.empty()) GTEST_SKIP() << r.skipped;
    EXPECT_TRUE(r.passed) << harness::describe(c) << ": rel error " << r.rel_err << " > " << r.tolerance << "; "
                          << r.message;
    std::cout << "[ fp8     ] " << c.label << ": rel error " << r.rel_err << ", lse max abs error "
              << r.lse_max_abs_err << "\n";
  }
}

TEST(HopperSupport, NamesTheFieldAndTheValue) {
  using hopper::KernelKey;
  EXPECT_EQ(hopper::why_unsupported(KernelKey{128, DType::bf16, DType::bf16}, 64, 4), "");
  EXPECT_EQ(hopper::why_unsupported(KernelKey{96, DType::bf16, DType::bf16}, 64, 4),
            "head_dim must be 64, 128 or 256, got 96");
  EXPECT_EQ(hopper::why_unsupported(KernelKey{128, DType::bf16, DType::e4m3}, 64, 4), "");
  EXPECT_EQ(hopper::why_unsupported(KernelKey{128, DType::bf16, DType::f16}, 64, 4),
            "cache dtype must be q's (bf16) or e4m3, got f16");
  EXPECT_EQ(hopper::why_unsupported(KernelKey{128, DType::f16, DType::f16}, 3, 4),
            "page_size must be 1, 2, 4, 8, 16, 32, 64, 128 or 256, got 3");
  EXPECT_EQ(hopper::why_unsupported(KernelKey{128, DType::bf16, DType::bf16}, 16, 256),
            "num_qo_heads / num_kv_heads must be in 1..128, got 256");
  const Capabilities caps = hopper::capabilities();
  EXPECT_FALSE(caps.custom_mask);
  EXPECT_TRUE(caps.cuda_graph);  // decode graphs, on planned's kernel
  EXPECT_EQ(caps.page_sizes, (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256}));
}

// The capability every caller reads: a 16-bit cache must have q's dtype, an e4m3 one is taken
// under either (dequantised as rows load).
TEST(HopperSupport, CacheIsQsDtypeOrE4m3) {
  const Capabilities caps = hopper::capabilities();
  const AttentionSpec spec = AttentionSpec::dense(8, 2, 128);
  KvCacheConfig cache = KvCacheConfig::for_spec(spec);
  cache.device = Device::cuda;
  cache.page_size = 16;
  cache.dtype = DType::e4m3;
  EXPECT_EQ(why_unsupported(caps, spec, cache, nullptr, DType::bf16), "");
  EXPECT_EQ(why_unsupported(caps, spec, cache, nullptr, DType::f16), "");
  cache.dtype = DType::f16;
  EXPECT_EQ(why_unsupported(caps, spec, cache, nullptr, DType::f16), "");
  EXPECT_EQ(why_unsupported(caps, spec, cache, nullptr, DType::bf16), "cache dtype must be q's (bf16), got f16");
}

TEST(HopperSupport, TilesHoldWholeTokens) {
  EXPECT_EQ(hopper::tile_rows(128, 1), 128);
  EXPECT_EQ(hopper::tile_rows(128, 4), 128);
  EXPECT_EQ(hopper::tile_rows(128, 7), 126);
  EXPECT_EQ(hopper::tile_rows(128, 128), 128);
}

// How K/V load follows the cache and the options, and the plan's rows the kernel it picks: at d64
// with TMA boxes three consumer warpgroups (192 rows), gathering two (128); the others 128.
TEST(HopperSupport, TileRowsFollowTheKernelsLoad) {
  using hopper::KvLoad;
  EXPECT_EQ(hopper::kv_load(DType::bf16, 64, false, false), KvLoad::tma_boxes);
  EXPECT_EQ(hopper::kv_load(DType::f16, 8, false, false), KvLoad::tma_boxes);
  EXPECT_EQ(hopper::kv_load(DType::bf16, 4, false, false), KvLoad::gather);
  EXPECT_EQ(hopper::kv_load(DType::bf16, 64, true, false), KvLoad::gather);
  EXPECT_EQ(hopper::kv_load(DType::e4m3, 64, false, false), KvLoad::gather_e4m3);
  EXPECT_EQ(hopper::kv_load(DType::e4m3, 64, false, true), KvLoad::tma_fp8);
  EXPECT_EQ(hopper::extend_block_m(64, KvLoad::tma_boxes), 192);
  EXPECT_EQ(hopper::extend_block_m(64, KvLoad::gather), 128);
  EXPECT_EQ(hopper::extend_block_m(64, KvLoad::gather_e4m3), 128);
  EXPECT_EQ(hopper::extend_block_m(128, KvLoad::tma_boxes), 128);
  EXPECT_EQ(hopper::extend_block_m(128, KvLoad::tma_fp8), 128);
  EXPECT_EQ(hopper::extend_block_m(256, KvLoad::tma_boxes), 128);
  EXPECT_EQ(hopper::tile_rows(192, 4), 192);
  EXPECT_EQ(hopper::tile_rows(192, 7), 189);
}

// The launcher's own checks, before any CUDA call: what the capabilities cannot say.
TEST(HopperExtendParams, RefusesWhatTheKernelLacks) {
  hopper::ExtendParams p;
  p.num_qo_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim_qk = p.head_dim_vo = 128;
  p.page_size = 16;
  p.sm_scale = 0.1f;
  p.tile_rows = 128;
  auto message = [&] {
    try {
      hopper::check_extend_params(p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message(), "accepted");
  p.tile_rows = 64;
  EXPECT_EQ(message(), "hopper extend: the plan's tiles have 64 rows, the kernel's 128");
  p.tile_rows = 128;
  const uint8_t mask = 1;
  p.custom_mask = &mask;
  EXPECT_EQ(message(), "hopper extend: custom masks are not served (planned serves them)");
  p.custom_mask = nullptr;
  p.kv_dtype = DType::f16;
  EXPECT_EQ(message(), "hopper extend: cache dtype must be q's (bf16) or e4m3, got f16");
  p.kv_dtype = DType::e4m3;  // dequantised as rows load, with factors of scale x 2^120
  p.k_scale = 0.5f;
  p.v_scale = 300.0f;
  EXPECT_EQ(message(), "hopper extend: an e4m3 cache's v_scale must be in (0, 255) with bf16 q, got 300 "
                       "(planned serves it)");
  p.v_scale = 0.25f;
  EXPECT_EQ(message(), "accepted");
  p.q_dtype = DType::f16;  // the f16 factor, scale x 2^8, must be a normal f16
  p.k_scale = 1e-8f;
  EXPECT_EQ(message(), "hopper extend: an e4m3 cache's k_scale must be in [2^-22, 255) with f16 q, got 1e-08 "
                       "(planned serves it)");
  p.q_dtype = DType::bf16;
  p.k_scale = p.v_scale = 1.0f;
  p.kv_dtype = DType::bf16;
  p.page_size = 4;  // gathered with cp.async
  EXPECT_EQ(message(), "accepted");
  p.page_size = 12;
  EXPECT_EQ(message(), "hopper extend: page_size must be 1, 2, 4, 8, 16, 32, 64, 128 or 256, got 12");
  p.page_size = 16;
  p.fp8_products = true;  // on e4m3 tensor cores: an e4m3 cache, d128, TMA boxes
  EXPECT_EQ(message(), "hopper extend: fp8 products need an e4m3 cache, got bf16");
  p.kv_dtype = DType::e4m3;
  EXPECT_EQ(message(), "accepted");
  p.page_size = 4;
  EXPECT_EQ(message(), "hopper extend: fp8 products need pages of 8 slots or more, got 4");
  p.page_size = 16;
  p.head_dim_qk = p.head_dim_vo = 64;
  p.tile_rows = 128;
  EXPECT_EQ(message(), "hopper extend: fp8 products need head_dim 128, got 64");
}


// Every work is some CTA's exactly once, each CTA's works ascending (so it may stop at the first past
// the list), whatever the grid and the list's length.
TEST(HopperScheduler, EachWorkIsOneCtasOnce) {
  for (const int grid : {1, 2, 7, 132}) {
    for (const int works : {0, 1, 6, 131, 132, 133, 263, 2048, 2049}) {
      std::vector<int> seen(static_cast<size_t>(works), 0);
      for (int cta = 0; cta < grid; ++cta) {
        int last = -1;
        for (int k = 0, w = hopper::persistent_work(0, cta, grid); w < works; w = hopper::persistent_work(++k, cta, grid)) {
          ASSERT_GT(w, last) << "grid " << grid << " cta " << cta;
          ++seen[static_cast<size_t>(w)];
          last = w;
        }
      }
      for (int w = 0; w < works; ++w) EXPECT_EQ(seen[static_cast<size_t>(w)], 1) << "grid " << grid << ", work " << w;
    }
  }
}

// A longest-first list (causal 1 x 8192, llama3-8b heads: 256 q tiles of 32 tokens x 4 heads, 8 KV
// heads, KV tiles of 192 keys) over 132 CTAs: the busiest CTA within 1% of the mean, where round
// robin puts it 6% over.
TEST(HopperScheduler, SnakeBalancesALongestFirstList) {
  std::vector<int> cost;
  for (int q = 255; q >= 0; --q)
    for (int h = 0; h < 8; ++h) cost.push_back((32 * (q + 1) + 191) / 192);
  const int grid = 132;
  auto busiest_over_mean = [&](auto work_of) {
    std::vector<double> load(grid, 0.0);
    double total = 0.0;
    for (int cta = 0; cta < grid; ++cta)
      for (int k = 0, w = work_of(0, cta); w < static_cast<int>(cost.size()); w = work_of(++k, cta)) {
        load[static_cast<size_t>(cta)] += cost[static_cast<size_t>(w)];
        total += cost[static_cast<size_t>(w)];
      }
    return *std::max_element(load.begin(), load.end()) / (total / grid);
  };
  const double snake = busiest_over_mean([&](int k, int cta) { return hopper::persistent_work(k, cta, grid); });
  const double round_robin = busiest_over_mean([&](int k, int cta) { return k * grid + cta; });
  EXPECT_LT(snake, 1.01);
  EXPECT_GT(round_robin, 1.05);
}

}  // namespace
}  // namespace attnkit
