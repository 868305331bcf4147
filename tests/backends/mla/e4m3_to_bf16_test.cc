// e4m3 -> bf16 / f16 by moving bits (cuda/e4m3_to_bf16.h, used by mla's fp8_blocked narrow kernels
// and hopper's e4m3 cache),
// checked on the host against attnkit's e4m3 decoding (dtype.h, itself checked on hand-computed
// codes in tests/core): every pair of bytes, the NaN test on every byte at every place, and the
// error of the one bf16 multiply that applies the block scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "attnkit/dtype.h"
#include "cuda/e4m3_to_bf16.h"

namespace attnkit::mla {
namespace {

namespace cv = ::attnkit::cuda::e4m3_to_bf16;

bool is_nan_code(uint32_t byte) { return (byte & 0x7fu) == 0x7fu; }

// The value a bf16 half of a word holds, in double (exact: bf16 subnormals included).
double half_value(uint32_t word, int half) {
  return static_cast<double>(bf16_bits_to_float(static_cast<uint16_t>(word >> (16 * half))));
}

// The low two bytes' bf16 word, as the kernel forms it (the high two, from a quad of
// equal halves, must come out the same).
uint32_t pair_word(uint32_t two) {
  uint32_t lo = 0, hi = 0;
  cv::scaled_down_quad(two | (two << 16), lo, hi);
  EXPECT_EQ(lo, hi) << std::hex << "0x" << two;
  return lo;
}

TEST(E4m3ToBf16, EveryPairOfBytesIsTheValueTimesTwoToTheMinus120) {
  for (uint32_t two = 0; two < 0x10000u; ++two) {
    const uint32_t word = pair_word(two);
    for (int half = 0; half < 2; ++half) {
      const auto byte = static_cast<uint8_t>(two >> (8 * half));
      if (is_nan_code(byte)) continue;
      const double expected = static_cast<double>(e4m3_bits_to_float(byte));
      ASSERT_EQ(std::ldexp(half_value(word, half), 120), expected) << "byte 0x" << std::hex << int{byte};
      ASSERT_EQ(std::signbit(half_value(word, half)), std::signbit(expected)) << "byte 0x" << std::hex << int{byte};
    }
  }
}

TEST(E4m3ToBf16, EveryPairOfBytesInF16IsTheValueTimesTwoToTheMinus8) {
  for (uint32_t two = 0; two < 0x10000u; ++two) {
    uint32_t lo = 0, hi = 0;
    cv::scaled_down_quad_f16(two | (two << 16), lo, hi);
    ASSERT_EQ(lo, hi);
    for (int half = 0; half < 2; ++half) {
      const auto byte = static_cast<uint8_t>(two >> (8 * half));
      if (is_nan_code(byte)) continue;
      const double got = static_cast<double>(f16_bits_to_float(static_cast<uint16_t>(lo >> (16 * half))));
      const double expected = static_cast<double>(e4m3_bits_to_float(byte));
      ASSERT_EQ(std::ldexp(got, 8), expected) << "byte 0x" << std::hex << int{byte};
      ASSERT_EQ(std::signbit(got), std::signbit(expected)) << "byte 0x" << std::hex << int{byte};
    }
  }
}

TEST(E4m3ToBf16, SubnormalsAndTheLargestValueByHand) {
  // 0x01: 2^-9 (the smallest subnormal) -> bf16 0x0010, 2^-129; 0x7e: 448 -> 0x07e0, 1.75 x 2^-112;
  // 0x88: -2^-6 (the smallest normal, negative) -> 0x8080. Bytes 0..3 of 0x88_7e_01_00 -> lo, hi.
  uint32_t lo = 0, hi = 0;
  cv::scaled_down_quad(0x887e0100u, lo, hi);
  EXPECT_EQ(lo, 0x00100000u);
  EXPECT_EQ(hi, 0x808007e0u);
  // __byte_perm's rule: bytes 1, 3 of x, then 1, 3 of y (indices 4..7).
  EXPECT_EQ(cv::byte_perm(0x44332211u, 0x88776655u, 0x7531u), 0x88664422u);
  EXPECT_EQ(std::ldexp(half_value(0x0010u, 0), 120), std::ldexp(1.0, -9));
  EXPECT_EQ(std::ldexp(half_value(0x07e0u, 0), 120), 448.0);
}

TEST(E4m3ToBf16, HasNanFindsANanByteAtEveryPlace) {
  std::mt19937 rng(7);
  for (uint32_t byte = 0; byte < 256; ++byte) {
    for (int place = 0; place < 4; ++place) {
      for (int trial = 0; trial < 64; ++trial) {
        uint32_t others = rng() & ~(0xffu << (8 * place));
        bool expected = is_nan_code(byte);
        for (int p = 0; p < 4; ++p)
          if (p != place) expected = expected || is_nan_code((others >> (8 * p)) & 0xffu);
        const uint32_t four = others | (byte << (8 * place));
        ASSERT_EQ(cv::has_nan(four), expected) << std::hex << "0x" << four;
      }
    }
  }
}

// The kernel's product: bf16(x) x bf16(scale x 2^120), rounded to bf16. Both factors have 8
// significant bits, so the double product is exact, and so is its float (no subnormal here).
double one_step(uint32_t byte, float scale) {
  const double x = half_value(pair_word(byte), 0);
  const double f = static_cast<double>(bf16_bits_to_float(float_to_bf16_bits(scale * cv::kTwoPow120)));
  return static_cast<double>(bf16_bits_to_float(float_to_bf16_bits(static_cast<float>(x * f))));
}

TEST(E4m3ToBf16, OneMultiplyIsWithinTwoBf16RoundingsOfValueTimesScale) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> log2_scale(-20.0f, std::log2(cv::kOneStepScaleLimit) - 1e-4f);
  for (int trial = 0; trial < 2000; ++trial) {
    const float scale = std::exp2(log2_scale(rng));
    ASSERT_TRUE(std::isfinite(scale * cv::kTwoPow120));
    for (uint32_t byte = 0; byte < 256; ++byte) {
      if (is_nan_code(byte)) continue;
      const double exact = static_cast<double>(e4m3_bits_to_float(static_cast<uint8_t>(byte))) * scale;
      const double got = one_step(byte, scale);
      // Two roundings to 8 significant bits, each within u = 2^-8 relative (u / (1 + u), to be
      // exact): less than 2u = 2^-7 together. One rounding (the conversion unit's path) is u.
      ASSERT_LE(std::abs(got - exact), std::ldexp(std::abs(exact), -7)) << "byte " << byte << " scale " << scale;
    }
  }
}

TEST(E4m3ToBf16, TheFactorStaysFiniteBelowTheLimit) {
  const float below = std::nextafter(cv::kOneStepScaleLimit, 0.0f);
  const float factor = bf16_bits_to_float(float_to_bf16_bits(below * cv::kTwoPow120));
  EXPECT_TRUE(std::isfinite(factor));
  EXPECT_EQ(cv::kTwoPow120, std::ldexp(1.0f, 120));
}

}  // namespace
}  // namespace attnkit::mla
