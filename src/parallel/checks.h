// What the context-parallel decode and prefill steps share: what they refuse, their row checks,
// and the dtype of their partial outputs.
#pragma once

#include <algorithm>

#include "attnkit/backend.h"
#include "attnkit/error.h"
#include "attnkit/spec.h"

namespace attnkit::parallel {

// Why a share of the history cannot apply `spec` (a sliding window, sinks, a score_mod or a
// mask_mod: the global positions or the whole softmax a share does not see), or null.
inline const char* why_not_shareable(const AttentionSpec& spec) {
  if (spec.window_left >= 0) return "a sliding window (window_left >= 0)";
  if (!spec.sinks.empty()) return "sinks";
  if (!spec.score_mod.empty()) return "a score_mod";
  if (!spec.mask_mod.empty()) return "a mask_mod";
  return nullptr;
}

// `t` must be [rows, heads, dim] of `dtype` on `device` (null data only where rows is 0); `who`
// opens the message ("context parallel decode").
inline void check_rows(const char* who, const char* field, const TensorView& t, int64_t rows, int heads, int dim,
                       DType dtype, Device device) {
  ATTNKIT_CHECK(t.rank == 3 && t.dim(0) == rows && t.dim(1) == heads && t.dim(2) == dim, who, ": ", field, " must be [",
                rows, ", ", heads, ", ", dim, "], got ", t.describe());
  ATTNKIT_CHECK(t.dtype == dtype && t.device == device && (rows == 0 || !t.empty()), who, ": ", field, " must be ",
                dtype_name(dtype), " on ", device_name(device), ", got ", t.describe());
}

// The dtype a rank's partial outputs are computed in: f32 where the backend takes f32 q (the
// widened q is exact), so that the only rounding to q's dtype is the merged output's; else q's.
inline DType partial_dtype(const Capabilities& caps, DType q_dtype) {
  const bool f32 = std::find(caps.q_dtypes.begin(), caps.q_dtypes.end(), DType::f32) != caps.q_dtypes.end();
  return f32 ? DType::f32 : q_dtype;
}

}  // namespace attnkit::parallel
