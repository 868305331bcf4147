// Host-callable wrappers over CUDA memory and device queries, so core code needs no CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnkit::cuda {

void* device_malloc(size_t nbytes);
void device_free(void* ptr) noexcept;
void copy_host_to_device(void* dst, const void* src, size_t nbytes);
void copy_device_to_host(void* dst, const void* src, size_t nbytes);
void copy_device_to_device(void* dst, const void* src, size_t nbytes);
void device_memset(void* dst, uint8_t value, size_t nbytes);
void device_synchronize();

struct DeviceInfo {
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int num_sms = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
};
// Empty when a CUDA device can be used; else why not.
std::string why_unavailable();
DeviceInfo device_info();

}  // namespace attnkit::cuda
