// Merging partial attention states: o = sum_i exp(lse_i - lse) o_i, lse = log sum_i exp(lse_i).
// Natural-log LSE; an empty partial has lse = -inf and contributes nothing.
#pragma once

#include <vector>

#include "attnkit/tensor.h"

namespace attnkit {

struct AttentionState {
  TensorView o;    // [num_tokens, num_heads, head_dim] f32 (CPU)
  TensorView lse;  // [num_tokens, num_heads] f32 (CPU)
};

// Writes the merge of `parts` into `out` (which may alias none of them). All parts share one shape.
void merge_states(const std::vector<AttentionState>& parts, const AttentionState& out);

}  // namespace attnkit
