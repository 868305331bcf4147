// Which CUDA device is here, and whether attnkit can use it.
#include "attnkit/tensor.h"
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit::cuda {

namespace {
std::string cuda_version(int v) { return detail::concat(v / 1000, ".", v % 1000 / 10); }
}  // namespace

// The reason in the words of the machine: no driver, a driver but no GPU, or a driver older than
// the runtime attnkit was built with (cudaErrorInsufficientDriver covers both the first and the last).
std::string why_unavailable() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess && count > 0) return {};
  cudaGetLastError();
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  if (driver == 0) return "no NVIDIA driver is installed (no GPU can be used on this machine)";
  if (err == cudaSuccess || err == cudaErrorNoDevice) {
    return detail::concat("no NVIDIA GPU found (driver for CUDA ", cuda_version(driver), " installed)");
  }
  if (err == cudaErrorInsufficientDriver) {
    return detail::concat("the NVIDIA driver supports CUDA up to ", cuda_version(driver), ", older than the CUDA ",
                          cuda_version(runtime), " that attnkit was built with: update the driver");
  }
  return detail::concat("no usable NVIDIA GPU (", cudaGetErrorString(err), ")");
}

std::string why_not_hopper() {
  std::string why;
  if (!cuda_available(&why)) return why;
  const DeviceInfo d = device_info();
  if (d.compute_major != 9) {
    return detail::concat("needs a Hopper GPU (sm_90: TMA and wgmma), this is ", d.name, " (sm_", d.compute_major,
                          d.compute_minor, ")");
  }
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
