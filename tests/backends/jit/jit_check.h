// What the jit GPU tests share: why the backend cannot run here (no GPU, no NVRTC), and a case run
// on it, with the tuner's tile or one pinned through ATTNKIT_JIT_TILE, held to `reference`.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "attnkit/registry.h"
#include "attnkit/tensor.h"
#include "harness/check.h"

namespace attnkit::testing {

// Empty where the jit backend runs here; else why not (the test skips with it).
inline std::string why_jit_cannot_run() {
  std::string why;
  if (!cuda_available(&why)) return why;
  why = Registry::global().get("jit").why_unavailable();
  return why.empty() ? why : "jit: " + why;
}

// `c` on jit against reference, `tile` ("n64 w4x1 m1 s2") pinned where given: every element within
// the dtype's tolerance, the worst one named where not.
inline void expect_jit_matches_reference(const harness::CheckCase& c, const std::string& tile = "") {
  struct PinnedTile {  // unset again however run_check leaves
    explicit PinnedTile(const std::string& t) { if (!t.empty()) ::setenv("ATTNKIT_JIT_TILE", t.c_str(), 1); }
    ~PinnedTile() { ::unsetenv("ATTNKIT_JIT_TILE"); }
  };
  harness::CheckResult r;
  {
    const PinnedTile pinned(tile);
    r = harness::run_check("jit", c);
  }
  ASSERT_TRUE(r.skipped.empty()) << r.skipped;
  EXPECT_TRUE(r.passed) << harness::describe(c) << (tile.empty() ? "" : " on " + tile) << ": rel error " << r.rel_err
                        << " > " << r.tolerance << "; " << r.message;
}

}  // namespace attnkit::testing
