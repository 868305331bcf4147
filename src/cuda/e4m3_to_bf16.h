// e4m3 -> bf16 (or f16) by moving bits, so that dequantising needs no conversion instruction: the
// SM's conversion unit, which e4m3 -> f16 -> f32 -> bf16 uses twice a pair of values, bounds a
// kernel that dequantises a whole cache tile (mla's fp8_blocked narrow kernels, hopper's e4m3
// cache).
//
// An e4m3 byte is sign, 4 exponent bits (bias 7) and 3 mantissa bits. Put its sign at bit 15 and
// its other 7 bits at bits 4..10 of a bf16 (8 exponent bits, bias 127, 7 mantissa bits): the bf16
// then holds the e4m3 value times 2^(7 - 127) = 2^-120, exactly. The exponent field and the
// mantissa bits keep their meaning; an e4m3 subnormal (exponent field 0, value m x 2^-9) lands on
// the bf16 subnormal m x 2^-129. Only NaN (S.1111.111) does not carry over: it becomes
// 480 x 2^-120, so callers test for it (has_e4m3_nan) and convert such words another way.
// One bf16 multiply by the block's scale x 2^120 (rounded to bf16) then gives value x scale.
// Host and device: the host tests check every byte.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ATTNKIT_E4M3_HD __host__ __device__ __forceinline__
#else
#define ATTNKIT_E4M3_HD inline
#endif

namespace attnkit::cuda::e4m3_to_bf16 {

// CUDA's __byte_perm: byte i of the result is byte (s >> 4i) & 7 of y:x (x the low four).
ATTNKIT_E4M3_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t bytes = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((bytes >> (8 * ((s >> (4 * i)) & 7))) & 0xffu) << (8 * i);
  return r;
#endif
}

// Four e4m3 bytes (`four`, the first in the low byte) -> four bf16 holding each value x 2^-120:
// bytes 0 and 1 in `lo` (byte 0 in its low half), 2 and 3 in `hi`. Each pair costs two byte
// permutes (the magnitudes to bits 0..6 and 16..22, the signs to bits 15 and 31) and one
// shift-and-add, after two masks shared by both pairs.
ATTNKIT_E4M3_HD void scaled_down_quad(uint32_t four, uint32_t& lo, uint32_t& hi) {
  const uint32_t magnitudes = four & 0x7f7f7f7fu, signs = four & 0x80808080u;
  lo = (byte_perm(magnitudes, 0, 0x4140) << 4) + byte_perm(signs, 0, 0x1404);
  hi = (byte_perm(magnitudes, 0, 0x4342) << 4) + byte_perm(signs, 0, 0x3424);
}

// The same into f16 (5 exponent bits, bias 15, 10 mantissa bits): the other 7 bits go to bits
// 7..13 of each half, which then holds the value x 2^(7 - 15) = 2^-8, subnormals included.
ATTNKIT_E4M3_HD void scaled_down_quad_f16(uint32_t four, uint32_t& lo, uint32_t& hi) {
  const uint32_t magnitudes = four & 0x7f7f7f7fu, signs = four & 0x80808080u;
  lo = (byte_perm(magnitudes, 0, 0x4140) << 7) + byte_perm(signs, 0, 0x1404);
  hi = (byte_perm(magnitudes, 0, 0x4342) << 7) + byte_perm(signs, 0, 0x3424);
}

// Whether any of the four e4m3 bytes of `four` is NaN (low 7 bits all ones): adding 1 to each
// byte's low 7 bits reaches bit 7 only from 0x7f, and never carries into the next byte.
ATTNKIT_E4M3_HD bool has_nan(uint32_t four) { return (((four & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u) != 0; }

// The scale at or above which scale x 2^120 overflows bf16 (largest finite 255.0 x 2^120): such
// blocks (latents of 255 x 448 = 114,240 or more) multiply twice, by 2^120 and then by the scale.
constexpr float kOneStepScaleLimit = 255.0f;
constexpr float kTwoPow120 = 1.329227995784916e36f;  // 2^120
constexpr float kTwoPow8 = 256.0f;                    // the f16 form's factor: scale x 2^8

}  // namespace attnkit::cuda::e4m3_to_bf16
