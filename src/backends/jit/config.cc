#include "backends/jit/config.h"

#include "attnkit/error.h"

namespace attnkit::jit {

Capabilities capabilities() {
  Capabilities c;
  c.device = Device::cuda;
  c.q_dtypes.assign(Support::q_dtypes.begin(), Support::q_dtypes.end());
  c.kv_dtypes.assign(Support::kv_dtypes.begin(), Support::kv_dtypes.end());
  c.max_head_dim = Support::max_head_dim;
  c.head_dim_multiple = Support::head_dim_multiple;
  c.mla = false;
  c.custom_mask = false;
  c.variants = true;
  return c;
}

}  // namespace attnkit::jit
