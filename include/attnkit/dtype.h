// Element types of tensors and of the KV cache, with exact host conversions (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace attnkit {

// f32..e4m3 hold values; i32, i64 and u8 hold indices and masks.
enum class DType : uint8_t { f32, f16, bf16, e4m3, i32, i64, u8 };
enum class Device : uint8_t { cpu, cuda };

std::string_view dtype_name(DType dtype);
std::string_view device_name(Device device);
// Throws attnkit::Error naming `field` when `text` is not a known name.
DType parse_dtype(std::string_view text, std::string_view field = "dtype");

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::e4m3: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

// Bit-exact conversions. float -> narrow rounds to nearest, ties to even; NaN stays NaN.
// e4m3 is the "fn" variant (no infinities, max finite 448): out-of-range values saturate to +-448.
uint16_t float_to_f16_bits(float x);
float f16_bits_to_float(uint16_t bits);
uint16_t float_to_bf16_bits(float x);
float bf16_bits_to_float(uint16_t bits);
uint8_t float_to_e4m3_bits(float x);
float e4m3_bits_to_float(uint8_t bits);

// Element `i` of a buffer of `dtype`, widened to float (used by CPU code that is dtype-generic).
float load_as_float(const void* data, DType dtype, int64_t i);
// Stores `x` rounded to `dtype` at element `i`.
void store_from_float(void* data, DType dtype, int64_t i, float x);

}  // namespace attnkit
