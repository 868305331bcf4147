// The 16-bit outputs of a GPU test, as bits: downloaded from a harness::Staged, so that a CUDA
// graph's replay and a fresh run can be compared bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "harness/device_copy.h"

namespace attnkit::testing {

inline std::vector<uint16_t> download_bits(harness::Staged& t) {
  t.download();
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.host_data(), out.size() * sizeof(uint16_t));
  return out;
}

}  // namespace attnkit::testing
