// Tensor maps (the TMA's descriptors of a global tensor) made on the host, held as opaque bytes so
// that host headers need no driver header. Kernels take them as __grid_constant__ parameters.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "attnkit/dtype.h"

namespace attnkit::cuda {

struct alignas(64) TensorMap {
  unsigned char bytes[128];  // a CUtensorMap
};

// A tiled map over `base`: dims and box innermost first, byte strides of dims 1.. (dim 0 is
// contiguous). bf16 or f16 elements with 128-byte swizzle (the layout wgmma reads), or f32 words
// unswizzled (raw bytes copied as they lie: the fp8_blocked latent slots). Throws attnkit::Error
// naming `what` when the driver refuses it.
TensorMap make_tensor_map(const char* what, DType dtype, const void* base, std::initializer_list<int64_t> dims,
                          std::initializer_list<int64_t> strides_bytes, std::initializer_list<int> box);

}  // namespace attnkit::cuda
