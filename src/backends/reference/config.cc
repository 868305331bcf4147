#include "backends/reference/config.h"

namespace attnkit::reference {

Capabilities capabilities() {
  Capabilities c;
  c.device = Device::cpu;
  c.q_dtypes = {DType::f32, DType::f16, DType::bf16};
  c.kv_dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3};
  c.mla = true;
  c.fp8_blocked_latent = true;
  c.lse = true;
  c.variants = true;
  return c;  // everything else: the defaults, which allow every feature
}

}  // namespace attnkit::reference
