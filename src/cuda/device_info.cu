// Which CUDA device is here, and whether attnkit can use it.
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit::cuda {

std::string why_unavailable() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return detail::concat("no usable CUDA device (", cudaGetErrorString(err), ")");
  }
  if (count == 0) return "no CUDA device";
  return {};
}

DeviceInfo device_info() {
  int device = 0;
  ATTNKIT_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  ATTNKIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.num_sms = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  info.l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  return info;
}

std::string current_device_name() { return device_info().name; }

}  // namespace attnkit::cuda
