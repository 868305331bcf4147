// This machine's own ceilings, measured: what the `cpu` backend's benchmark figures are divided by.
// Both probes use every thread of the backend's pool and the widest SIMD target the CPU supports.
#pragma once

#include <cstdint>
#include <memory>

namespace attnkit {

class Buffer;

// The read probe's buffer (512 MiB, each thread's slice first touched by that thread), kept for
// passes taken between a benchmark's timed calls: on a shared host the bandwidth a core gets moves
// from second to second, so a call is compared with a pass read just before it.
class ReadProbe {
 public:
  ReadProbe();
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;
  // Bytes a second of one pass over the whole buffer by every thread of the pool.
  double pass();

 private:
  std::unique_ptr<Buffer> storage_;
  float* data_ = nullptr;
  int64_t slice_ = 0;  // floats a thread reads
  int threads_ = 0;
};

// Bytes a second that all cores together read from a buffer far larger than the caches
// (512 MiB, summed with SIMD loads; best of several passes of a ReadProbe).
double measure_read_bandwidth();

// fp32 FLOP/s of fused multiply-adds on all cores (independent register accumulators; an FMA
// counts as two FLOPs; best of several runs).
double measure_fma_rate();

}  // namespace attnkit
