// The comparison every check and test passes or fails by: the bound each products dtype allows
// (4 units of its roundoff), and compare()'s worst element, NaN handling and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnkit/compare.h"
#include "attnkit/error.h"

namespace attnkit {
namespace {

TEST(DefaultTolerance, FourUnitsOfTheProductsDtypesRoundoff) {
  EXPECT_EQ(default_tolerance(DType::bf16, DType::bf16), 4.0 * 0x1p-8);
  EXPECT_EQ(default_tolerance(DType::f16, DType::f16), 4.0 * 0x1p-11);
  EXPECT_EQ(default_tolerance(DType::bf16, DType::e4m3), 4.0 * 0x1p-8);  // the cache is read as stored by both
  EXPECT_EQ(default_tolerance(DType::e4m3, DType::e4m3), 0.25);          // q and P rounded to e4m3 (3 bits)
  EXPECT_EQ(default_tolerance(DType::f32, DType::f32), 1e-5);
}

TEST(Compare, NamesTheWorstElementRelativeToTheLargestReference) {
  std::vector<float> want = {1.0f, -4.0f, 2.0f, 0.5f};
  std::vector<float> got = {1.0f, -3.9f, 2.2f, 0.5f};
  const Comparison c = compare(TensorView(got.data(), DType::f32, Device::cpu, {4}),
                               TensorView(want.data(), DType::f32, Device::cpu, {4}));
  EXPECT_EQ(c.worst, 2);
  EXPECT_NEAR(c.max_abs_err, 0.2, 1e-6);
  EXPECT_NEAR(c.rel_err, 0.2 / 4.0, 1e-7);
  EXPECT_TRUE(c.within(0.06));
  EXPECT_FALSE(c.within(0.04));
}

TEST(Compare, AnUnwrittenOutputIsTheWorstError) {
  std::vector<float> want = {1.0f, 2.0f};
  std::vector<float> got = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  const Comparison c = compare(TensorView(got.data(), DType::f32, Device::cpu, {2}),
                               TensorView(want.data(), DType::f32, Device::cpu, {2}));
  EXPECT_EQ(c.worst, 1);
  EXPECT_TRUE(std::isinf(c.rel_err));
  EXPECT_FALSE(c.within(1e30));
}

TEST(Compare, RefusesDifferentCountsNamingBothViews) {
  std::vector<float> a(3), b(4);
  try {
    compare(TensorView(a.data(), DType::f32, Device::cpu, {3}), TensorView(b.data(), DType::f32, Device::cpu, {4}));
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 3 elements, expected the 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnkit
