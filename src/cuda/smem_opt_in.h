// Dynamic shared memory past 48 KB must be opted into, kernel by kernel, and the opt-in belongs to
// the kernel's instance in each device's context: a process that runs on several GPUs (a thread a
// GPU) must make it on each, where a once-a-process flag would leave every GPU but the first to
// refuse the launch. One SmemOptIn a kernel (a function-local static beside its launch); ensure()
// costs a device query and an atomic load once made.
#pragma once

#include <array>
#include <atomic>
#include <mutex>

namespace attnkit::cuda {

class SmemOptIn {
 public:
  // Opts `kernel` (a __global__ function) into `bytes` of dynamic shared memory on the calling
  // thread's current device, unless this object already did there.
  void ensure(const void* kernel, int bytes);

 private:
  static constexpr int kMaxDevices = 64;
  std::array<std::atomic<bool>, kMaxDevices> done_{};
  std::mutex mutex_;
};

}  // namespace attnkit::cuda
