// Host-callable wrappers over CUDA memory and device queries for the CUDA backends and helpers:
// core's device memory interface (core/device_memory.h, implemented here) and the device's properties.
#pragma once

#include <cstddef>
#include <string>

#include "core/device_memory.h"

namespace attnkit::cuda {

struct DeviceInfo {
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int num_sms = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
};
DeviceInfo device_info();
// Empty on a Hopper GPU (sm_90); else why not (no GPU, or another architecture), for the
// backends whose kernels are sm_90a only.
std::string why_not_hopper();

}  // namespace attnkit::cuda
