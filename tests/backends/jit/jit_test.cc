// The `jit` backend against `reference` through the harness (fresh random inputs, poisoned
// outputs, every element compared): the head dims the ahead-of-time backends lack, qk and vo
// apart, GQA and MQA, page sizes, mixed dtypes, and the user variants (ALiBi, a document mask,
// a prefix-LM mask, soft-cap through score_mod) on decode, extend and mixed batches, the
// tuner's choice and every tile it may choose.
#include <gtest/gtest.h>

#include "backends/jit/config.h"
#include "jit_check.h"
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
  // Tensor-core cases: split-KV (one long request cannot fill the GPU alone), speculative rows,
  // a long full prefill, sinks with a window and soft-cap, f16, a head dim that is not a multiple of 16.
  c.push_back(jit_case("d128 long decode split", 32, 8, 128, 128, 16, {{9000, 1}, {40, 1}}));
  c.push_back(jit_case("d128 group 8 two tokens", 64, 8, 128, 128, 16, {{3000, 2}, {100, 2}}));
  c.push_back(jit_case("d128 full prefill", 16, 4, 128, 128, 64, {{0, 700}, {200, 90}}));
  c.back().spec.causal = false;
  c.push_back(jit_case("d64 sinks window soft-cap", 8, 2, 64, 64, 16, {{500, 1}, {0, 300}, {2000, 3}}));
  c.back().spec.sinks = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -3.0f, 0.25f, 4.0f};
  c.back().spec.window_left = 127;
  c.back().spec.logits_soft_cap = 30.0f;
  c.push_back(jit_case("d64 document mask skips tiles", 8, 2, 64, 64, 16, {{0, 700}, {100, 1}}, "",
                       "kv_pos / 128 == q_pos / 128"));
  // The mainloop runs from an item's first seen tile to its last: sink tokens leave tile 0 seen and
  // the tiles between it and the document unseen; rows before position 200 see nothing at all.
  c.push_back(jit_case("d128 sinks and documents", 8, 2, 128, 128, 16, {{0, 900}, {300, 1}}, "",
                       "kv_pos < 4 || kv_pos / 256 == q_pos / 256"));
  c.push_back(jit_case("d128 rows that see nothing", 8, 2, 128, 128, 16, {{0, 600}, {0, 9}}, "",
                       "kv_pos >= 200 && kv_pos / 512 == q_pos / 512"));
  c.push_back(jit_case("d72 f16 mixed", 12, 4, 72, 72, 32, {{1200, 1}, {0, 150}}));
  c.back().q_dtype = DType::f16;
  c.back().kv_dtype = DType::f16;
  // 12 chunks a row, which do not divide the threads: the loader's partial passes.
  c.push_back(jit_case("d96 extend with prefix", 32, 8, 96, 96, 16, {{70, 300}, {0, 45}, {500, 1}}));
  return c;
}

// Every tile the tuner may pick, pinned in turn, on the cases that reach each of the template's paths.
std::vector<std::pair<int, jit::TileConfig>> tile_cases() {
  std::vector<std::pair<int, jit::TileConfig>> out;
  jit::KernelKey d128;
  d128.head_dim_qk = d128.head_dim_vo = 128;
  std::vector<jit::TileConfig> tiles = jit::tile_candidates(d128, true, "sm_90");
  for (const jit::TileConfig& t : jit::tile_candidates(d128, false, "sm_90")) tiles.push_back(t);
  const std::vector<std::string> labels = {"d128 gqa decode", "d128 extend with prefix", "d128 long decode split",
                                           "d64 sinks window soft-cap", "d128 document mask extend",
                                           "d64 document mask skips tiles", "d128 sinks and documents",
                                           "d128 rows that see nothing"};
  const std::vector<harness::CheckCase> all = cases();
  for (const jit::TileConfig& t : tiles) {
    for (const std::string& l : labels) {
      for (size_t i = 0; i < all.size(); ++i) {
        if (all[i].label == l) out.push_back({static_cast<int>(i), t});
      }
    }
  }
  // The wgmma template at head dims whose 16-byte chunks do not divide its threads (72: 10 a row,
  // 96: 12, 192/128: 24 of K and 16 of V), each prefill tile that fits them.
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string& l = all[i].label;
    if (l != "d72 f16 mixed" && l != "d96 extend with prefix" && l != "d192 by 128 extend") continue;
    jit::KernelKey key;
    key.head_dim_qk = all[i].spec.head_dim_qk;
    key.head_dim_vo = all[i].spec.head_dim_vo;
    for (const jit::TileConfig& t : jit::tile_candidates(key, false, "sm_90")) {
      if (t.wgmma) out.push_back({static_cast<int>(i), t});
    }
  }
  return out;
}

class JitConformance : public ::testing::TestWithParam<int> {};

TEST_P(JitConformance, MatchesReference) {
  if (const std::string why = testing::why_jit_cannot_run(); !why.empty()) GTEST_SKIP() << why;
  testing::expect_jit_matches_reference(cases()[static_cast<size_t>(GetParam())]);
}

std::string tile_case_name(int param) {
  const auto [index, tile] = tile_cases()[static_cast<size_t>(param)];
  return attnkit::testing::param_name(cases()[static_cast<size_t>(index)].label + " " + tile.describe());
}

class JitTiles : public ::testing::TestWithParam<int> {};

TEST_P(JitTiles, EveryTileMatchesReference) {
  if (const std::string why = testing::why_jit_cannot_run(); !why.empty()) GTEST_SKIP() << why;
  const auto [index, tile] = tile_cases()[static_cast<size_t>(GetParam())];
  testing::expect_jit_matches_reference(cases()[static_cast<size_t>(index)], tile.describe());
}

INSTANTIATE_TEST_SUITE_P(Tiles, JitTiles, ::testing::Range(0, static_cast<int>(tile_cases().size())),
                         [](const auto& info) { return tile_case_name(info.param); });

INSTANTIATE_TEST_SUITE_P(Shapes, JitConformance, ::testing::Range(0, static_cast<int>(cases().size())),
                         [](const auto& info) {
                           return attnkit::testing::param_name(cases()[static_cast<size_t>(info.param)].label);
                         });

}  // namespace
}  // namespace attnkit
