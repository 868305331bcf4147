// e4m3 -> bf16 by moving bits, for the fp8_blocked latent cache's narrow kernels (fp8_tile.cuh),
// so that dequantising needs no conversion instruction. The SM's conversion unit, which e4m3 ->
// f16 -> f32 -> bf16 used twice a pair of values, bounded that kernel.
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

namespace attnkit::mla::e4m3_to_bf16 {

// Two e4m3 bytes (the low byte first: bits 0..7 and 8..15 of `two`) -> two bf16 (the first in the
// low half) holding each value x 2^-120.
ATTNKIT_E4M3_HD constexpr uint32_t scaled_down_pair(uint32_t two) {
  return ((two & 0x7fu) << 4) | ((two & 0x80u) << 8) | ((two & 0x7f00u) << 12) | ((two & 0x8000u) << 16);
}

// Whether any of the four e4m3 bytes of `four` is NaN (low 7 bits all ones): adding 1 to each
// byte's low 7 bits reaches bit 7 only from 0x7f, and never carries into the next byte.
ATTNKIT_E4M3_HD constexpr bool has_nan(uint32_t four) { return (((four & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u) != 0; }

// The scale at or above which scale x 2^120 overflows bf16 (largest finite 255.0 x 2^120): such
// blocks (latents of 255 x 448 = 114,240 or more) multiply twice, by 2^120 and then by the scale.
constexpr float kOneStepScaleLimit = 255.0f;
constexpr float kTwoPow120 = 1.329227995784916e36f;  // 2^120

}  // namespace attnkit::mla::e4m3_to_bf16
