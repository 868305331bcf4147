// This machine's own ceilings, measured: what the `cpu` backend's benchmark figures are divided by.
// Both probes use every thread of the backend's pool and the widest SIMD target the CPU supports.
#pragma once

namespace attnkit {

// Bytes a second that all cores together read from a buffer far larger than the caches
// (512 MiB, summed with SIMD loads; best of several passes).
double measure_read_bandwidth();

// fp32 FLOP/s of fused multiply-adds on all cores (independent register accumulators; an FMA
// counts as two FLOPs; best of several runs).
double measure_fma_rate();

}  // namespace attnkit
