// Host conversions against known bit patterns, round-to-nearest-even ties and saturation.
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/dtype.h"
#include "attnkit/error.h"

namespace attnkit {
namespace {

TEST(Dtype, F16KnownPatterns) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00);  // the tie above the largest half rounds to inf
  EXPECT_EQ(float_to_f16_bits(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(0x1p-25f), 0x0000);  // a tie between 0 and 2^-24: even is 0
  EXPECT_EQ(float_to_f16_bits(0x1.8p-24f), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_f16_bits(0x1p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_f16_bits(1.0f + 0x1p-11f), 0x3c00);  // tie: stays even
  EXPECT_EQ(float_to_f16_bits(1.0f + 0x1.8p-10f), 0x3c02);  // 1.5 ulp: tie up to even
  EXPECT_EQ(float_to_f16_bits(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(NAN))));
  EXPECT_EQ(f16_bits_to_float(0x3555), 0x1.554p-2f);
  EXPECT_EQ(f16_bits_to_float(0x0001), 0x1p-24f);
}

TEST(Dtype, Bf16KnownPatterns) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(-1.5f), 0xbfc0);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), 0x3f80);  // tie: stays even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1.8p-7f), 0x3f82);  // tie: up to even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1.1p-8f), 0x3f81);  // above the tie
  EXPECT_EQ(bf16_bits_to_float(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
}

TEST(Dtype, E4m3KnownPatterns) {
  EXPECT_EQ(float_to_e4m3_bits(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3_bits(-1.0f), 0xb8);
  EXPECT_EQ(float_to_e4m3_bits(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3_bits(1000.0f), 0x7e);  // saturates, never NaN
  EXPECT_EQ(float_to_e4m3_bits(-INFINITY), 0xfe);
  EXPECT_EQ(float_to_e4m3_bits(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(float_to_e4m3_bits(0x1p-9f), 0x01);  // smallest subnormal
  EXPECT_EQ(float_to_e4m3_bits(0x1p-10f), 0x00);  // tie between 0 and 2^-9: even is 0
  EXPECT_EQ(float_to_e4m3_bits(0x1p-6f), 0x08);  // smallest normal
  EXPECT_EQ(float_to_e4m3_bits(1.0625f), 0x38);  // tie between 1 and 1.125: even is 1
  EXPECT_EQ(float_to_e4m3_bits(1.1875f), 0x3a);  // tie between 1.125 and 1.25: even is 1.25
  EXPECT_EQ(e4m3_bits_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x01), 0x1p-9f);
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0x7f)));
}

TEST(Dtype, EveryE4m3ValueRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(float_to_e4m3_bits(e4m3_bits_to_float(static_cast<uint8_t>(b))), b == 0x80 ? 0x80 : b) << b;
  }
}

TEST(Dtype, EveryF16ValueRoundTrips) {
  for (int b = 0; b < 65536; ++b) {
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) continue;  // NaN
    ASSERT_EQ(float_to_f16_bits(f16_bits_to_float(static_cast<uint16_t>(b))), b) << b;
  }
}

TEST(Dtype, ParseNamesTheField) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp8"), DType::e4m3);
  try {
    parse_dtype("int4", "kv_dtype");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kv_dtype must be one of f32, f16, bf16, e4m3, got 'int4'");
  }
}

}  // namespace
}  // namespace attnkit
