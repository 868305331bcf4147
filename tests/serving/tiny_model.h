// The smallest model the serving tests replay: GQA with 2 query heads on 1 KV head of 8 dims, so
// `reference` runs thousands of requests in a second.
#pragma once

#include "attnkit/spec.h"

namespace attnkit::serving::testing {

inline ModelSpec tiny_model(int layers) {
  AttentionSpec s;
  s.num_qo_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim_qk = 8;
  s.head_dim_vo = 8;
  ModelSpec m;
  m.name = "tiny";
  m.layers.assign(static_cast<size_t>(layers), s);
  return m;
}

}  // namespace attnkit::serving::testing
