// The bf16 decode's online softmax over a tile (decode_bf16.h): against the formula in double, with
// -inf scores past the tile, a tile that sees nothing, and the running max and sum carried between
// tiles. Skips itself on CPUs without AVX512-BF16, where that path never runs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels/bf16_dot.h"
#include "backends/cpu/kernels/decode_bf16.h"

namespace attnkit::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

TEST(CpuBf16Softmax, TilesMatchTheFormula) {
  if (!bf16_dot_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::mt19937 rng(7);
  std::normal_distribution<float> score(0.0f, 8.0f);
  const int n = 64;
  // Three tiles of one head: the second sees nothing, the third only its first 23 keys.
  std::vector<std::vector<float>> tiles(3, std::vector<float>(n));
  for (float& x : tiles[0]) x = score(rng);
  for (float& x : tiles[1]) x = kNegInf;
  for (int k = 0; k < n; ++k) tiles[2][k] = k < 23 ? score(rng) + 30.0f : kNegInf;

  float m = kNegInf, l = 0.0f;
  double want_m = -INFINITY, want_l = 0.0;
  for (std::vector<float>& tile : tiles) {
    std::vector<float> s = tile;
    const float alpha = bf16_softmax_tile(s.data(), n, &m, &l);
    double tile_max = -INFINITY;
    for (float x : tile) tile_max = std::max(tile_max, static_cast<double>(x));
    const double new_m = std::max(want_m, tile_max);
    const double want_alpha = std::isinf(want_m) ? 0.0 : std::exp(want_m - new_m);
    EXPECT_NEAR(alpha, want_alpha, 1e-6 * want_alpha);
    double sum = 0.0;
    for (int k = 0; k < n; ++k) {
      const double p = std::isinf(tile[k]) ? 0.0 : std::exp(tile[k] - new_m);
      if (p == 0.0) {
        EXPECT_EQ(s[k], 0.0f) << "key " << k;  // masked keys weigh exactly nothing
      } else {
        EXPECT_NEAR(s[k], p, 1e-5 * p) << "key " << k;
      }
      sum += p;
    }
    want_l = want_l * want_alpha + sum;
    want_m = new_m;
    EXPECT_EQ(m, static_cast<float>(want_m));
    EXPECT_NEAR(l, want_l, 1e-5 * want_l);
  }
}

TEST(CpuBf16Softmax, ATileThatSeesNothingLeavesNothing) {
  if (!bf16_dot_available()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::vector<float> s(32, kNegInf);
  float m = kNegInf, l = 0.0f;
  EXPECT_EQ(bf16_softmax_tile(s.data(), 32, &m, &l), 0.0f);
  EXPECT_EQ(m, kNegInf);
  EXPECT_EQ(l, 0.0f);
  for (float p : s) EXPECT_EQ(p, 0.0f);
}

}  // namespace
}  // namespace attnkit::cpu
