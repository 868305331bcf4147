// EventTimer: a pair of CUDA events around a region of the default stream.
#include "cuda/check.h"
#include "cuda/timer.h"

namespace attnkit::cuda {

EventTimer::EventTimer() {
  cudaEvent_t a, b;
  ATTNKIT_CUDA_CHECK(cudaEventCreate(&a));
  ATTNKIT_CUDA_CHECK(cudaEventCreate(&b));
  start_ = a;
  stop_ = b;
}

EventTimer::~EventTimer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

void EventTimer::start() { ATTNKIT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_))); }

float EventTimer::stop_ms() {
  ATTNKIT_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_)));
  ATTNKIT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0.0f;
  ATTNKIT_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return ms;
}

}  // namespace attnkit::cuda
