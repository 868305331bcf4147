// TensorView: a non-owning, contiguous, row-major view of up to four dimensions on one device;
// Buffer: owned memory on the host or a CUDA device; copies between devices.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "attnkit/dtype.h"

namespace attnkit {

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int rank = 0;
  std::array<int64_t, 4> shape{};

  TensorView() = default;
  TensorView(void* data, DType dtype, Device device, std::initializer_list<int64_t> dims);

  bool empty() const { return data == nullptr; }
  int64_t dim(int i) const { return shape[static_cast<size_t>(i)]; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // "[4, 32, 128] bf16 cuda", for error messages.
  std::string describe() const;
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

// Owned, zero-initialised-never memory: contents are unspecified until written.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t nbytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  void copy_from_host(const void* src, size_t nbytes, size_t offset = 0);
  void copy_to_host(void* dst, size_t nbytes, size_t offset = 0) const;
  void fill_bytes(uint8_t value);
  TensorView view(DType dtype, std::initializer_list<int64_t> dims) const;

 private:
  void release() noexcept;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_ = Device::cpu;
};

// Copies the elements of `src` into `dst`, on any devices (host to CUDA, CUDA to host, or within
// one); both must have the same dtype and element count, else attnkit::Error names the mismatch.
// Blocks until the copy is done.
void copy(const TensorView& dst, const TensorView& src);

// Whether this build and machine can run CUDA code, and if not, why (for `attnkit list`).
bool cuda_available(std::string* why_not = nullptr);
// The name of the CUDA device attnkit runs on ("NVIDIA H200"); empty where cuda_available() is false.
std::string cuda_device_name();
// Blocks until all work queued on the device by attnkit is done; no-op for the CPU.
void synchronize(Device device);

}  // namespace attnkit
