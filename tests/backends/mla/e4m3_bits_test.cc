// The `mla` kernels' integer e4m3 -> f32 conversion (e4m3_bits.h), for every byte: exactly the
// value e4m3 defines (sign, 4 exponent bits of bias 7, 3 mantissa bits; subnormals below 2^-6).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "attnkit/dtype.h"
#include "backends/mla/kernels/e4m3_bits.h"

namespace attnkit::mla {
namespace {

float converted(uint8_t b) {
  return std::bit_cast<float>(e4m3_top_as_f32_bits(static_cast<uint32_t>(b) << 24)) * kE4m3Unscale;
}

// The value from e4m3's definition, computed here.
float defined(uint8_t b) {
  const int e = (b >> 3) & 15;
  const int m = b & 7;
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (b & 0x80) ? -mag : mag;
}

TEST(MlaE4m3Bits, HandComputedValues) {
  EXPECT_EQ(converted(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(converted(0x80)));
  EXPECT_EQ(converted(0x38), 1.0f);
  EXPECT_EQ(converted(0xb8), -1.0f);
  EXPECT_EQ(converted(0x7e), 448.0f);                   // the largest finite
  EXPECT_EQ(converted(0x08), std::ldexp(1.0f, -6));      // the smallest normal
  EXPECT_EQ(converted(0x01), std::ldexp(1.0f, -9));      // the smallest subnormal
  EXPECT_EQ(converted(0x87), -std::ldexp(7.0f, -9));     // the largest negative subnormal
}

TEST(MlaE4m3Bits, EveryFiniteByteIsExact) {
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;  // NaN: never written by the store
    const auto byte = static_cast<uint8_t>(b);
    EXPECT_EQ(converted(byte), defined(byte)) << "byte 0x" << std::hex << b;
    EXPECT_EQ(converted(byte), e4m3_bits_to_float(byte)) << "byte 0x" << std::hex << b;
  }
}

}  // namespace
}  // namespace attnkit::mla
