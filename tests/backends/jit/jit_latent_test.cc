// The `jit` backend's latent kernels against `reference` through the harness (fresh random inputs,
// poisoned outputs, every element compared) on DeepSeek's absorbed MLA (576 / 512): 16 and 128
// heads, decode (1 and 2 new tokens a request), extend chunked over a paged prefix and a long
// decode the work plan splits, each on page sizes 1, 16 and 64 in bf16 or f16, KV lengths that are
// not multiples of a tile; q and cache apart (the warp-row kernel); and every latent tile pinned.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/jit/config.h"
#include "jit_check.h"
#include "param_name.h"

namespace attnkit {
namespace {

struct Shape {
  const char* name;
  std::vector<std::pair<int64_t, int64_t>> requests_16_heads;  // (prefix, new tokens) each
  std::vector<std::pair<int64_t, int64_t>> requests_128_heads;  // shorter: the fp64 reference's time
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {
      {"decode", {{700, 1}, {33, 1}, {130, 1}, {0, 1}}, {{333, 1}, {65, 1}}},
      {"decode 2 tokens", {{517, 2}, {77, 2}}, {{150, 2}, {1, 2}}},
      {"extend over a prefix", {{70, 30}, {0, 45}, {200, 17}}, {{40, 20}, {0, 9}}},
      {"long decode split", {{6000, 1}, {90, 1}}, {{3000, 1}}},
  };
  return s;
}

struct PageAndDtype {
  int page_size;
  DType dtype;  // q and cache
};

// Each (heads, shape) on the three page sizes, the dtypes alternating: 24 cases.
std::vector<harness::CheckCase> cases() {
  const std::vector<PageAndDtype> pages = {{1, DType::bf16}, {16, DType::f16}, {64, DType::bf16}};
  std::vector<harness::CheckCase> out;
  for (int heads : {16, 128}) {
    for (const Shape& shape : shapes()) {
      for (size_t i = 0; i < pages.size(); ++i) {
        // The other dtype on every other (heads, shape): both meet every page size.
        const DType dtype = (out.size() / pages.size()) % 2 == 0 ? pages[i].dtype
                                                                 : (pages[i].dtype == DType::bf16 ? DType::f16 : DType::bf16);
        harness::CheckCase c;
        c.label = detail::concat(heads, " heads ", shape.name, " page ", pages[i].page_size, " ", dtype_name(dtype));
        c.spec = AttentionSpec::mla(heads, 512, 64, 1.0f / std::sqrt(192.0f));
        c.q_dtype = c.kv_dtype = dtype;
        c.page_size = pages[i].page_size;
        c.requests = heads == 16 ? shape.requests_16_heads : shape.requests_128_heads;
        out.push_back(std::move(c));
      }
    }
  }
  harness::CheckCase mixed = out[2];  // q bf16 over an f16 latent: the warp-row kernel
  mixed.label = "16 heads decode q bf16 cache f16";
  mixed.kv_dtype = DType::f16;
  out.push_back(std::move(mixed));
  return out;
}

class JitLatentConformance : public ::testing::TestWithParam<int> {};

TEST_P(JitLatentConformance, MatchesReference) {
  if (const std::string why = testing::why_jit_cannot_run(); !why.empty()) GTEST_SKIP() << why;
  testing::expect_jit_matches_reference(cases()[static_cast<size_t>(GetParam())]);
}

INSTANTIATE_TEST_SUITE_P(DeepSeek, JitLatentConformance, ::testing::Range(0, static_cast<int>(cases().size())),
                         [](const auto& info) {
                           return attnkit::testing::param_name(cases()[static_cast<size_t>(info.param)].label);
                         });

// Every tile a latent key may run, pinned in turn, on a decode case, an extend case and a split.
std::vector<std::pair<int, jit::TileConfig>> tile_cases() {
  jit::KernelKey latent;
  latent.head_dim_qk = 576;
  latent.head_dim_vo = 512;
  latent.latent = true;
  std::vector<jit::TileConfig> tiles = jit::tile_candidates(latent, true, "sm_90");
  for (const jit::TileConfig& t : jit::tile_candidates(latent, false, "sm_90")) tiles.push_back(t);
  std::vector<std::pair<int, jit::TileConfig>> out;
  for (const jit::TileConfig& t : tiles) {
    // cases() 0, 7, 10: 16 heads decode on page 1, extend over a prefix and the split on page 16.
    for (int index : {0, 7, 10}) out.push_back({index, t});
  }
  return out;
}

class JitLatentTiles : public ::testing::TestWithParam<int> {};

TEST_P(JitLatentTiles, EveryTileMatchesReference) {
  if (const std::string why = testing::why_jit_cannot_run(); !why.empty()) GTEST_SKIP() << why;
  const auto [index, tile] = tile_cases()[static_cast<size_t>(GetParam())];
  testing::expect_jit_matches_reference(cases()[static_cast<size_t>(index)], tile.describe());
}

std::string tile_case_name(int param) {
  const auto [index, tile] = tile_cases()[static_cast<size_t>(param)];
  return attnkit::testing::param_name(cases()[static_cast<size_t>(index)].label + " " + tile.describe());
}

INSTANTIATE_TEST_SUITE_P(DeepSeek, JitLatentTiles, ::testing::Range(0, static_cast<int>(tile_cases().size())),
                         [](const auto& info) { return tile_case_name(info.param); });

}  // namespace
}  // namespace attnkit
