// This GPU's two ceilings, measured rather than read off a datasheet: HBM read bandwidth and the
// bf16 matrix rate. The tool (tools/attnkit/ceilings.cc) reports results as fractions of them.
#pragma once

namespace attnkit {

// Bytes a second a read-only streaming kernel pulls from a buffer many times the L2 (median of
// repeated runs). Throws attnkit::Error where there is no usable CUDA device.
double measure_gpu_read_bandwidth();
// FLOP a second of a cuBLAS bf16 GEMM (fp32 accumulation) of 8192 x 8192 x 8192 on random data
// (median of repeated runs; zeros run faster and would flatter every ratio).
double measure_gpu_bf16_matrix_rate();

}  // namespace attnkit
