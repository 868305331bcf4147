// The merge of split-KV decode partials: o = sum_i exp(lse_i - lse) o_i with the sinks joining the
// denominator, written to out. The partials come from decode_kernel.cuh; the list from plan.cc.
#pragma once

#include "backends/planned/kernels/decode.h"

namespace attnkit::planned {

// Enqueues the merge on `stream`: a fixed grid (num_ctas CTAs) that reads the number of merges
// from the device, so a captured graph replays any plan. Nothing to do when p.merges is null.
void launch_decode_merge(const DecodeParams& p, cudaStream_t stream);

}  // namespace attnkit::planned
