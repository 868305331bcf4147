// Entry points of the `cpu` kernels, each dispatched at run time to the best SIMD target this CPU
// has (AVX-512, AVX2, SSE4 or portable code); what runs them and writes their results is elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels/params.h"

namespace attnkit::cpu {

// The Highway target the kernels dispatch to now (HWY_AVX2, ...; attnkit/cpu_target.h names it).
int64_t dispatched_target();

// f32 lanes of one vector on the chosen target (16 with AVX-512).
int simd_lanes_f32();

// The rows kernel (extend, mixed, MLA): a block of query rows against a range of keys, tile by
// tile, S^T = K Q^T with the rows across the SIMD lanes, online softmax down each lane.
size_t rows_scratch_floats(const AttendParams& p);
UnitState attend_rows(const AttendParams& p, const UnitWork& u, float* scratch);

// The heads kernel (decode): one token's every query head against a range of keys, reading each
// key's slot once for all heads, converting K and V in registers.
// Needs head_dim_qk and head_dim_vo to be multiples of 2 * simd_lanes_f32() (keys load in pairs of vectors).
size_t heads_scratch_floats(const AttendParams& p);
UnitState attend_heads(const AttendParams& p, const UnitWork& u, float* scratch);

}  // namespace attnkit::cpu
