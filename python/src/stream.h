// Ordering with the caller's CUDA stream. attnkit queues its CUDA work (plans' uploads, cache
// stores, kernels) on the calling thread's default stream; an engine queues on its own
// (torch.cuda.current_stream()). Around each call the two are joined by events: attnkit's stream
// waits for what the caller queued before, the caller's for what attnkit queued. On the legacy
// default stream (torch's default) no event is needed: the per-thread stream already orders with
// it. Inside torch.cuda.graph capture the events make attnkit's work part of the captured graph.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

namespace attnkit::python {

class StreamJoin {
 public:
  StreamJoin() = default;
  ~StreamJoin();
  StreamJoin(const StreamJoin&) = delete;
  StreamJoin& operator=(const StreamJoin&) = delete;

  // The caller's stream: `stream` when it is an int (a cudaStream_t), else torch's current
  // stream on `device_id` where torch is imported, else the legacy default stream (0).
  static uintptr_t resolve(nanobind::handle stream, int device_id);
  // Makes the two events now, outside any graph capture (a CUDA backend's constructor calls it).
  void create_events();
  // attnkit's stream waits for the work queued on `caller` so far.
  void enter(uintptr_t caller);
  // `caller` waits for the work attnkit queued.
  void leave(uintptr_t caller);

 private:
  void* entered_ = nullptr;  // cudaEvent_t, made on first use
  void* left_ = nullptr;
};

}  // namespace attnkit::python
