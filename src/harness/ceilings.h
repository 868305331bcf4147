// This machine's own ceilings, measured: what benchmark figures are divided by. The CPU probes
// (ceilings_cpu.cc) use every thread of the `cpu` backend's pool and the widest SIMD target the CPU
// supports; the GPU probes (ceilings_cuda.cu) measure HBM read bandwidth and the bf16 matrix rate
// rather than reading them off a datasheet.
#pragma once

#include <cstdint>
#include <memory>

namespace attnkit {
class Buffer;
}

namespace attnkit::harness {

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

#ifdef ATTNKIT_WITH_CUDA
// Bytes a second a read-only streaming kernel pulls from a buffer many times the L2 (median of
// repeated runs). Throws attnkit::Error where there is no usable CUDA device.
double measure_gpu_read_bandwidth();
// FLOP a second of a cuBLAS bf16 GEMM (fp32 accumulation) of 8192 x 8192 x 8192 on random data
// (median of repeated runs; zeros run faster and would flatter every ratio).
double measure_gpu_bf16_matrix_rate();
#endif

}  // namespace attnkit::harness
