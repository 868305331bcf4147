// Host conversions between float and the narrow dtypes, rounding to nearest even.
#include "attnkit/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "attnkit/error.h"

namespace attnkit {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::e4m3: return "e4m3";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

std::string_view device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

DType parse_dtype(std::string_view text, std::string_view field) {
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::e4m3}) {
    if (text == dtype_name(d)) return d;
  }
  if (text == "fp8" || text == "fp8_e4m3") return DType::e4m3;
  throw Error(detail::concat(field, " must be one of f32, f16, bf16, e4m3, got '", text, "'"));
}

uint16_t float_to_f16_bits(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (f >> 16) & 0x8000u;
  uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {
    // Below 2^-14 the half is subnormal, in units of 2^-24: scaling by 2^24 is exact, and
    // nearbyint rounds half to even in the default rounding mode. 1024 lands on the smallest normal.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  abs += 0xfffu + ((abs >> 13) & 1u);  // round the 13 dropped bits to nearest even
  abs -= 112u << 23;                   // exponent bias 127 -> 15
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float f16_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t float_to_bf16_bits(float x) {
  uint32_t f = std::bit_cast<uint32_t>(x);
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // quiet NaN
  f += 0x7fffu + ((f >> 16) & 1u);
  return static_cast<uint16_t>(f >> 16);
}

float bf16_bits_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint8_t float_to_e4m3_bits(float x) {
  const uint32_t f = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((f >> 24) & 0x80u);
  uint32_t abs = f & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);
  constexpr uint8_t kMaxFinite = 0x7e;  // 448 = 1.75 * 2^8
  if (abs >= 0x43e00000u) return sign | kMaxFinite;  // >= 448 (and inf) saturates
  if (abs < 0x3c800000u) {
    // Below 2^-6 e4m3 is subnormal, in units of 2^-9; 8 units is the smallest normal (0x08).
    const float scaled = std::bit_cast<float>(abs) * 512.0f;
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  abs += 0x7ffffu + ((abs >> 20) & 1u);  // keep 3 mantissa bits, nearest even
  const int exp = static_cast<int>(abs >> 23) - 127 + 7;
  const uint32_t mant = (abs >> 20) & 7u;
  if (exp > 15 || (exp == 15 && mant == 7)) return sign | kMaxFinite;  // 0x7f is NaN
  return static_cast<uint8_t>(sign | (static_cast<uint32_t>(exp) << 3) | mant);
}

float e4m3_bits_to_float(uint8_t bits) {
  const bool negative = bits & 0x80u;
  const int exp = (bits >> 3) & 0xf;
  const int mant = bits & 7;
  float v;
  if (exp == 15 && mant == 7) {
    v = std::nanf("");
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -9);
  } else {
    v = std::ldexp(1.0f + static_cast<float>(mant) / 8.0f, exp - 7);
  }
  return negative ? -v : v;
}

float load_as_float(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(data)[i];
    case DType::f16: return f16_bits_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::bf16: return bf16_bits_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::e4m3: return e4m3_bits_to_float(static_cast<const uint8_t*>(data)[i]);
    case DType::i32: return static_cast<float>(static_cast<const int32_t*>(data)[i]);
    case DType::i64: return static_cast<float>(static_cast<const int64_t*>(data)[i]);
    case DType::u8: return static_cast<float>(static_cast<const uint8_t*>(data)[i]);
  }
  return 0.0f;
}

void store_from_float(void* data, DType dtype, int64_t i, float x) {
  switch (dtype) {
    case DType::f32: static_cast<float*>(data)[i] = x; return;
    case DType::f16: static_cast<uint16_t*>(data)[i] = float_to_f16_bits(x); return;
    case DType::bf16: static_cast<uint16_t*>(data)[i] = float_to_bf16_bits(x); return;
    case DType::e4m3: static_cast<uint8_t*>(data)[i] = float_to_e4m3_bits(x); return;
    default: throw Error(detail::concat("store_from_float: dtype ", dtype_name(dtype), " holds no values"));
  }
}

}  // namespace attnkit
