#include "cuda/staged_upload.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/check.h"

namespace attnkit::cuda {

void check_not_capturing(cudaStream_t stream, const char* what) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  ATTNKIT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  ATTNKIT_CHECK(capturing == cudaStreamCaptureStatusNone, what,
                ": the stream is capturing a CUDA graph; plan the batch before the capture begins");
}

StagedUpload::~StagedUpload() {
  // Destructors must not throw: errors are ignored (the context may already be gone).
  for (int i = 0; i < 2; ++i) {
    if (copied_[i] != nullptr) {
      if (pending_[i]) cudaEventSynchronize(copied_[i]);
      cudaEventDestroy(copied_[i]);
    }
    if (staging_[i] != nullptr) cudaFreeHost(staging_[i]);
  }
}

void StagedUpload::wait(int i) {
  if (!pending_[i]) return;
  ATTNKIT_CUDA_CHECK(cudaEventSynchronize(copied_[i]));
  pending_[i] = false;
}

unsigned char* StagedUpload::begin(size_t bytes, cudaStream_t stream) {
  check_not_capturing(stream, "plan upload");
  const int i = current_;
  wait(i);
  if (capacity_[i] < bytes) {
    if (staging_[i] != nullptr) ATTNKIT_CUDA_CHECK(cudaFreeHost(staging_[i]));
    staging_[i] = nullptr;
    const size_t grown = std::max(bytes, capacity_[i] + capacity_[i] / 2);
    void* p = nullptr;
    ATTNKIT_CUDA_CHECK(cudaMallocHost(&p, grown));
    staging_[i] = static_cast<unsigned char*>(p);
    capacity_[i] = grown;
  }
  if (copied_[i] == nullptr) ATTNKIT_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[i], cudaEventDisableTiming));
  return staging_[i];
}

void StagedUpload::upload(void* device, size_t bytes, cudaStream_t stream) {
  const int i = current_;
  ATTNKIT_CHECK(staging_[i] != nullptr && bytes <= capacity_[i], "StagedUpload: upload of ", bytes,
                " bytes without a begin() of as many");
  ATTNKIT_CUDA_CHECK(cudaMemcpyAsync(device, staging_[i], bytes, cudaMemcpyHostToDevice, stream));
  ATTNKIT_CUDA_CHECK(cudaEventRecord(copied_[i], stream));
  pending_[i] = true;
  current_ = 1 - i;
}

}  // namespace attnkit::cuda
