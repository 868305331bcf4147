// What every context-parallel step refuses, said once for decode and prefill.
#pragma once

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

}  // namespace attnkit::parallel
