// Device memory and copies behind attnkit::Buffer.
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit::cuda {

namespace {
// A stream argument of core/device_memory.h: null is the calling thread's default stream.
cudaStream_t stream_or_default(void* stream) {
  return stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamPerThread;
}
}  // namespace

void* device_malloc(size_t nbytes) {
  void* ptr = nullptr;
  if (nbytes == 0) return nullptr;
  cudaError_t err = cudaMalloc(&ptr, nbytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    throw Error(detail::concat("cudaMalloc of ", nbytes, " bytes failed: ", cudaGetErrorString(err)));
  }
  return ptr;
}

void device_free(void* ptr) noexcept {
  if (ptr) cudaFree(ptr);
}

void copy_host_to_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes) ATTNKIT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice));
}
void copy_device_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes) ATTNKIT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost));
}
void copy_device_to_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes) ATTNKIT_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToDevice));
}
void copy_device_to_device_async(void* dst, const void* src, size_t nbytes, void* stream) {
  if (nbytes == 0) return;
  ATTNKIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream_or_default(stream)));
}
bool stream_is_capturing(void* stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ATTNKIT_CUDA_CHECK(cudaStreamIsCapturing(stream_or_default(stream), &status));
  return status != cudaStreamCaptureStatusNone;  // an invalidated capture is still one
}
void device_memset(void* dst, uint8_t value, size_t nbytes) {
  if (nbytes) ATTNKIT_CUDA_CHECK(cudaMemset(dst, value, nbytes));
}
void device_synchronize() { ATTNKIT_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace attnkit::cuda
