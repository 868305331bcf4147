// The device memory of a build without CUDA: nothing can be allocated, so a cuda Buffer, copy or
// synchronize fails with one clear error; there is never device memory to free.
#include "attnkit/error.h"
#include "core/device_memory.h"

namespace attnkit::cuda {

namespace {
[[noreturn]] void no_cuda() {
  throw Error("device cuda: this attnkit was built without CUDA (ATTNKIT_WITH_CUDA=OFF)");
}
}  // namespace

void* device_malloc(size_t) { no_cuda(); }
void device_free(void*) noexcept {}
void copy_host_to_device(void*, const void*, size_t) { no_cuda(); }
void copy_device_to_host(void*, const void*, size_t) { no_cuda(); }
void copy_device_to_device(void*, const void*, size_t) { no_cuda(); }
void copy_device_to_device_async(void*, const void*, size_t, void*) { no_cuda(); }
bool stream_is_capturing(void*) { return false; }  // there is no stream to capture
void device_memset(void*, uint8_t, size_t) { no_cuda(); }
void device_synchronize() { no_cuda(); }
std::string why_unavailable() { return "built without CUDA"; }
std::string current_device_name() { return {}; }

}  // namespace attnkit::cuda
