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

 private:
  void* start_ = nullptr;  // cudaEvent_t, kept opaque so host code needs no CUDA headers
  void* stop_ = nullptr;
};

}  // namespace attnkit::cuda
