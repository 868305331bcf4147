// A plan's one host-to-device copy without the host waiting for the GPU: the bytes are written into
// one of two pinned staging buffers (in turn) and copied asynchronously on the stream that runs
// the kernels reading them, so the copy lands after the previous batch's kernels and before the
// next ones. A staging buffer is written again only once the copy out of it (two plans back) has
// finished: in a serving loop that is long done, and the check is one event query.
#pragma once

#include <cstddef>

typedef struct CUevent_st* cudaEvent_t;
typedef struct CUstream_st* cudaStream_t;

namespace attnkit::cuda {

// Throws attnkit::Error naming `what` where `stream` is capturing a CUDA graph: a plan belongs
// before the capture (a captured copy would replay from a staging buffer long rewritten; the
// captured kernels read the device buffer the plan fills).
void check_not_capturing(cudaStream_t stream, const char* what);

class StagedUpload {
 public:
  StagedUpload() = default;
  ~StagedUpload();
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  // The next staging buffer, at least `bytes` long, free to write (growing it by half again
  // where it is short, once the copy out of it has finished). `stream` must not be capturing.
  unsigned char* begin(size_t bytes, cudaStream_t stream);
  // Copies [0, bytes) of the buffer begin() returned to `device` on `stream`, asynchronously.
  void upload(void* device, size_t bytes, cudaStream_t stream);

 private:
  void wait(int i);
  unsigned char* staging_[2] = {};
  size_t capacity_[2] = {};
  cudaEvent_t copied_[2] = {};  // recorded after the copy out of staging_[i]
  bool pending_[2] = {};
  int current_ = 0;
};

}  // namespace attnkit::cuda
