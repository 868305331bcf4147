#include "backends/cpu/config.h"

namespace attnkit::cpu {

Capabilities capabilities() {
  Capabilities c;
  c.device = Device::cpu;
  c.q_dtypes = {DType::f32, DType::f16, DType::bf16};
  c.kv_dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3};
  c.mla = true;
  c.fp8_blocked_latent = true;  // decoded row by row into the f32 tiles
  c.lse = true;  // written by the epilogue, for merging partial states (attnkit/merge.h)
  // Any head dim, page size 1..256, every mask and logit transform, extend, decode and mixed:
  // the defaults. No CUDA graphs: there is no device to capture.
  return c;
}

}  // namespace attnkit::cpu
