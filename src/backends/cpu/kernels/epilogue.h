// A unit's rows in their final form: written to the output (normalised, sinks added, rounded to
// the output dtype), or kept as a split-KV partial (o, lse) and later merged with merge_states.
#pragma once

#include "backends/cpu/kernels/params.h"

namespace attnkit::cpu {

// out[token, head] = o / (l + exp(sink - m)) * v_scale, and where p.lse is set lse[token, head] =
// m + log(l) (sinks left out); a row that saw no key gets zeros and lse -inf.
void write_rows(const AttendParams& p, const UnitWork& u, const UnitState& s);

// part_o [num_rows, head_dim_vo] = o / l * v_scale and part_lse [num_rows] = m + log(l)
// (natural log, sinks left out: they join once, after the merge); a row that saw no key gets
// o = 0, lse = -inf, which the merge ignores.
void write_partial(const AttendParams& p, const UnitWork& u, const UnitState& s, float* part_o, float* part_lse);

// Merges `num_parts` partials of the rows of `u` (part k at rows k * part_stride_rows) with
// merge_states, adds the sinks and writes the output (and the merged LSE where p.lse is set).
// `scratch` holds num_rows * (head_dim_vo + 1) floats.
void merge_partials(const AttendParams& p, const UnitWork& u, int num_parts, int part_stride_rows,
                    const float* part_o, const float* part_lse, float* scratch);

}  // namespace attnkit::cpu
