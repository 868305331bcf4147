// A plan's host-to-device copy without the host waiting for the GPU: two pinned staging buffers,
// written in turn, each uploaded with one asynchronous copy on the stream that runs the kernels
// reading it, so the copy lands after the previous batch's kernels and before the next ones. A
// buffer is written again only once the copy out of it (two uploads back) has finished; each upload
// is marked by a number the stream writes into a mapped host word after the copy, so the check is
// a load: on the H200's hosts cudaEventSynchronize on a finished event took 1.3-1.6 us between
// plans, the write 0.6-0.9 us more to enqueue than an event record (an event each upload where the
// driver offers no stream memory operations).
#pragma once

#include <cstddef>
#include <cstdint>

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
  ~StagedUpload() { release(); }
  StagedUpload(const StagedUpload&) = delete;
  StagedUpload& operator=(const StagedUpload&) = delete;

  // Both buffers at exactly `bytes`, once the copies out of them have finished; their bytes are
  // not kept.
  void allocate(size_t bytes);
  // At least `bytes` each: allocate(), growing by half again, where they are shorter.
  void reserve(size_t bytes);
  void release() noexcept;
  size_t capacity() const { return capacity_; }

  // The buffer the previous upload did not read, once the upload out of it (two back) has
  // finished: writing never waits for the previous upload's copy.
  std::byte* begin_write();
  // One host-to-device copy of [begin, end) of the buffer begin_write gave, to the same offsets of
  // `device`, ordered on `stream`.
  void upload(void* device, size_t begin, size_t end, cudaStream_t stream);

 private:
  // Until the stream has written upload `number`'s mark (spinning briefly, then yielding).
  void wait_for_mark(uint32_t number) const;

  size_t capacity_ = 0;
  void* staging_[2] = {};  // [capacity_] pinned host memory each
  cudaEvent_t uploaded_[2] = {};
  bool pending_[2] = {};              // an upload out of staging_[i] may still be in flight
  uint32_t* done_ = nullptr;          // mapped pinned word: the number of the last upload finished
  uint32_t* done_device_ = nullptr;   // the same word, as the stream writes it
  uint32_t uploads_ = 0;              // uploads so far (numbered from 1; compared modulo 2^32)
  uint32_t read_by_[2] = {};          // the upload that last read staging_[i] (0: an event marks it)
  cudaStream_t stream_ = nullptr;     // the last marked upload's
  int current_ = 0;                   // the buffer being written (begin_write's), next upload's source
};

}  // namespace attnkit::cuda
