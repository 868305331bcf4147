// The tile tuner without a GPU (tuner.h): every candidate measured once, the fastest chosen, kept
// in memory and on disk (a new process, here a new tuner over the same folder, reads it back
// without measuring), a corrupt entry measured again, buckets and keys apart, ATTNKIT_JIT_TILE
// pinning a tile or refusing a bad one by name.
#include "backends/jit/tuner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "attnkit/dtype.h"
#include "attnkit/error.h"
#include "backends/jit/config.h"

namespace attnkit::jit {
namespace {

KernelKey d128() {
  KernelKey k;
  k.head_dim_qk = k.head_dim_vo = 128;
  k.group = 4;
  k.page_size = 16;
  return k;
}

class JitTuner : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) / ("attnkit-tuner-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    ::unsetenv("ATTNKIT_JIT_TILE");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(JitTuner, MeasuresEachCandidateOnceAndKeepsTheFastest) {
  const std::vector<TileConfig> candidates = tile_candidates(d128(), false, "sm_90");
  ASSERT_GE(candidates.size(), 3u);
  const TileConfig fastest = candidates[2];
  int calls = 0;
  const auto measure = [&](const TileConfig& t) {
    ++calls;
    return t == fastest ? 1.0 : 2.0;
  };
  bool tuned = false;
  TileTuner a(dir_);
  EXPECT_EQ(a.choose(d128(), "prefill rows 2^13 kv 2^13", "sm_90", false, measure, &tuned), fastest);
  EXPECT_TRUE(tuned);
  EXPECT_EQ(calls, static_cast<int>(candidates.size()));
  EXPECT_EQ(a.choose(d128(), "prefill rows 2^13 kv 2^13", "sm_90", false, measure, &tuned), fastest);
  EXPECT_FALSE(tuned) << "remembered in memory";
  TileTuner b(dir_);  // another process over the same folder
  EXPECT_EQ(b.choose(d128(), "prefill rows 2^13 kv 2^13", "sm_90", false, measure, &tuned), fastest);
  EXPECT_FALSE(tuned) << "read back from disk";
  EXPECT_EQ(calls, static_cast<int>(candidates.size()));
  // Another bucket, another architecture, another key: each measured anew.
  b.choose(d128(), "prefill rows 2^10 kv 2^10", "sm_90", false, measure, &tuned);
  EXPECT_TRUE(tuned);
  b.choose(d128(), "prefill rows 2^13 kv 2^13", "sm_100", false, measure, &tuned);
  EXPECT_TRUE(tuned);
  KernelKey other = d128();
  other.page_size = 64;
  b.choose(other, "prefill rows 2^13 kv 2^13", "sm_90", false, measure, &tuned);
  EXPECT_TRUE(tuned);
}

// restart(): as a new process over a folder: what the tuner chose in memory is forgotten, the
// folder's choices are read back, an empty folder's measured anew (bench --jit-first-calls).
TEST_F(JitTuner, RestartForgetsWhatItHeldAndReadsTheFolder) {
  int calls = 0;
  const auto measure = [&](const TileConfig&) { return 1.0 + calls++; };
  bool tuned = false;
  const std::filesystem::path empty = dir_ / "empty";
  TileTuner t(dir_);
  t.choose(d128(), "decode rows 2^4 kv 2^12", "sm_90", true, measure, &tuned);
  EXPECT_TRUE(tuned);
  t.restart(dir_);
  t.choose(d128(), "decode rows 2^4 kv 2^12", "sm_90", true, measure, &tuned);
  EXPECT_FALSE(tuned) << "read back from the folder";
  t.restart(empty);
  t.choose(d128(), "decode rows 2^4 kv 2^12", "sm_90", true, measure, &tuned);
  EXPECT_TRUE(tuned) << "an empty folder: measured again, not remembered from before the restart";
}

TEST_F(JitTuner, ACorruptEntryIsMeasuredAgain) {
  const auto measure = [](const TileConfig& t) { return static_cast<double>(t.stages); };
  TileTuner(dir_).choose(d128(), "decode rows 2^4 kv 2^17", "sm_90", true, measure);
  for (const auto& e : std::filesystem::directory_iterator(dir_)) std::ofstream(e.path(), std::ios::trunc) << "garbage";
  bool tuned = false;
  TileTuner(dir_).choose(d128(), "decode rows 2^4 kv 2^17", "sm_90", true, measure, &tuned);
  EXPECT_TRUE(tuned);
}

TEST_F(JitTuner, APinnedTileIsUsedWithoutMeasuringAndABadOneIsRefused) {
  const auto never = [](const TileConfig&) -> double {
    ADD_FAILURE() << "a pinned tile is not measured";
    return 0.0;
  };
  ::setenv("ATTNKIT_JIT_TILE", "n32 w1x2 m1 s4", 1);
  EXPECT_EQ(TileTuner(dir_).choose(d128(), "b", "sm_90", true, never), (TileConfig{32, 1, 2, 1, 4}));
  ::setenv("ATTNKIT_JIT_TILE", "n32 w4x1", 1);
  try {
    TileTuner(dir_).choose(d128(), "b", "sm_90", true, never);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ATTNKIT_JIT_TILE: 'n32 w4x1' is not a tile"), std::string::npos) << e.what();
  }
  ::setenv("ATTNKIT_JIT_TILE", "n16 w1x2 m1 s2", 1);  // 8 keys a warp: not whole k steps
  EXPECT_THROW(TileTuner(dir_).choose(d128(), "b", "sm_90", true, never), Error);
  ::unsetenv("ATTNKIT_JIT_TILE");
}

// A candidate's output against the first's: a few units of the format apart agree; a wrong value,
// a NaN the first lacks, a missing element, disagree.
TEST(JitTunerAgreement, WithinAFewUnitsOfTheLargestValue) {
  const auto bf16 = [](std::initializer_list<float> xs) {
    std::vector<uint16_t> v;
    for (float x : xs) v.push_back(float_to_bf16_bits(x));
    return v;
  };
  const std::vector<uint16_t> first = bf16({1.0f, -2.0f, 0.5f, 0.0f});
  EXPECT_TRUE(outputs_agree(first, first, true));
  EXPECT_TRUE(outputs_agree(first, bf16({1.0f, -2.0f, 0.5f + 0.015625f, 0.0f}), true)) << "2^-6 x 2 apart: 1/4 the bound";
  EXPECT_FALSE(outputs_agree(first, bf16({1.0f, -2.0f, 0.75f, 0.0f}), true));
  EXPECT_FALSE(outputs_agree(first, bf16({1.0f, -2.0f, 0.5f, std::nanf("")}), true));
  EXPECT_FALSE(outputs_agree(first, bf16({1.0f, -2.0f, 0.5f}), true));
  std::vector<uint16_t> f16 = {float_to_f16_bits(1.0f), float_to_f16_bits(0.25f)};
  std::vector<uint16_t> close = {float_to_f16_bits(1.0f), float_to_f16_bits(0.25f + 0.0078125f)};
  EXPECT_TRUE(outputs_agree(f16, close, false));
  close[1] = float_to_f16_bits(0.3f);
  EXPECT_FALSE(outputs_agree(f16, close, false));
}

TEST(JitTunerBucket, PowersOfTwo) {
  EXPECT_EQ(shape_bucket(true, 16, 131072), "decode rows 2^4 kv 2^17");
  EXPECT_EQ(shape_bucket(false, 8192, 8193), "prefill rows 2^13 kv 2^14");
  EXPECT_EQ(shape_bucket(false, 1, 0), "prefill rows 2^0 kv 2^0");
}

}  // namespace
}  // namespace attnkit::jit
