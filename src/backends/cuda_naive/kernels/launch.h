// The three launches of naive attention for one batch, on the default stream, in this order:
// S = Q K^T (scores.cu), P = softmax(S) in place (softmax.cu), O = P V (pv.cu).
#pragma once

#include "backends/cuda_naive/kernels/params.h"

namespace attnkit::cuda_naive {

// Writes p.scores: the scaled, soft-capped logits, -inf where the key is not visible.
void launch_scores(const BatchParams& p);
// Turns each score row into probabilities in place (sinks in the denominator; a fully masked row
// becomes zeros).
void launch_softmax(const BatchParams& p);
// Writes p.out = P V.
void launch_pv(const BatchParams& p);

}  // namespace attnkit::cuda_naive
