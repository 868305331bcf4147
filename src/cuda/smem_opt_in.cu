// SmemOptIn (smem_opt_in.h): the shared-memory opt-in made once a device.
#include "attnkit/error.h"
#include "cuda/check.h"
#include "cuda/smem_opt_in.h"

namespace attnkit::cuda {

void SmemOptIn::ensure(const void* kernel, int bytes) {
  int device = 0;
  ATTNKIT_CUDA_CHECK(cudaGetDevice(&device));
  ATTNKIT_CHECK(device >= 0 && device < kMaxDevices, "shared-memory opt-in: device ", device, " is past the ",
                kMaxDevices, " devices a process is served on");
  auto& done = done_[static_cast<size_t>(device)];
  if (done.load(std::memory_order_acquire)) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  if (done.load(std::memory_order_relaxed)) return;
  ATTNKIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.store(true, std::memory_order_release);
}

}  // namespace attnkit::cuda
