// e4m3 -> f32 with integer operations, for the `mla` kernels' fp8_blocked tiles (fp8_tile.cuh):
// host and device alike, so that its exactness is tested on the host for every byte.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define ATTNKIT_MLA_HOST_DEVICE __host__ __device__
#else
#define ATTNKIT_MLA_HOST_DEVICE
#endif

namespace attnkit::mla {

// The bits of an f32 whose value is e4m3 byte b's times 2^-120, exactly (subnormals included),
// from a word holding b in its top byte and zeros below: shifted down 4 with the sign copied, then
// masked to the sign and b's 7 exponent-and-mantissa bits, which land on f32's low exponent and
// high mantissa bits (f32's exponent bias 127 is e4m3's 7 + 120). e4m3's NaN (0x7f, 0xff), which
// the store never writes, reads as 480.
ATTNKIT_MLA_HOST_DEVICE constexpr uint32_t e4m3_top_as_f32_bits(uint32_t top) {
  return static_cast<uint32_t>(static_cast<int32_t>(top) >> 4) & 0x87f00000u;
}

// What such an f32 is multiplied by to give the e4m3 value.
inline constexpr float kE4m3Unscale = 0x1p120f;

}  // namespace attnkit::mla

#undef ATTNKIT_MLA_HOST_DEVICE
