// CUDA-event timing of device work on the default stream, for the benchmark harness.
#pragma once

namespace attnkit::cuda {

class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start();
  // Records the stop event, waits for it and returns the milliseconds since start().
  float stop_ms();
  // Records the stop event without waiting, so the host can queue the next call meanwhile.
  void stop();
  // Waits for the stop event recorded by stop() and returns the milliseconds since start().
  float elapsed_ms();

 private:
  void* start_ = nullptr;  // cudaEvent_t, kept opaque so host code needs no CUDA headers
  void* stop_ = nullptr;
};

// Queues a read of a buffer twice the L2's size on the default stream: what a timed call reads
// next comes from HBM, as it does in a model where other layers' weights pass through the L2 in
// between. Read-only, so no dirty lines are written back during the call timed after it.
void flush_l2();

}  // namespace attnkit::cuda
