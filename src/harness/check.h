// The conformance harness: one case = a spec, dtypes, a page size and a list of requests; it is run
// through a backend and through `reference` on fresh random inputs, outputs poisoned, every element
// compared. Used by `attnkit check` and by the test suite.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/backend.h"
#include "attnkit/compare.h"
#include "attnkit/spec.h"

namespace attnkit::harness {

struct CheckCase {
  std::string label;
  AttentionSpec spec;
  DType q_dtype = DType::bf16;   // q, k, v and out
  DType kv_dtype = DType::bf16;  // the cache
  float k_scale = 1.0f;          // e4m3 caches only
  float v_scale = 1.0f;
  LatentFormat latent_format = LatentFormat::plain;  // MLA e4m3 caches: fp8_blocked's per-block scales
  int page_size = 16;
  std::vector<std::pair<int64_t, int64_t>> requests;  // (prefix_len, num_new_tokens) each
  bool custom_mask = false;      // a random tree-like mask on every request with new tokens
  bool shuffle_pages = true;     // page tables out of order
  int num_layers = 2;            // the plan is reused by every layer, each with fresh inputs
  uint64_t seed = 1;
  double tolerance = 0.0;        // 0: default_tolerance of what the backend's products round to
};

struct CheckResult {
  std::string skipped;          // non-empty: the backend does not support the case (the reason)
  bool passed = false;
  double max_abs_err = 0.0;
  double rel_err = 0.0;         // max_abs_err / max |reference|
  double tolerance = 0.0;
  std::string message;          // on failure: the worst element, its index and both values
  bool lse_checked = false;     // the backend writes the LSE (Capabilities::lse), and it was compared
  double lse_max_abs_err = 0.0; // then max |lse - ref|, held to `tolerance`
  std::string lse_message;      // the worst LSE row and both values
};

// The bound on max|out - ref| / max|ref| for a dtype pair (attnkit/compare.h).
using ::attnkit::default_tolerance;

// Writes random prefix K/V (drawn from `seed`, the same values whatever the device) of every
// request of `batch` into every layer of `cache`, through the cache's own store.
void fill_prefix(KvCache& cache, const ForwardBatch& batch, const AttentionSpec& spec, uint64_t seed);

// Runs `backend` (a registry name) and `reference` on the same fresh inputs; never throws for a
// mismatch (a failed result), but rethrows unexpected errors from the backend.
CheckResult run_check(const std::string& backend, const CheckCase& c, const BackendOptions& options = {});

// The fixed conformance table: kv_len 0 and 1, page size 1, partial last pages, GQA 1/4/8, MQA,
// windows, soft-cap, sinks, custom masks, MLA, every KV dtype, extend, decode and mixed.
std::vector<CheckCase> standard_cases();

// `count` random cases on the heads of `model` (lengths kept small enough for `reference`),
// using only features `caps` claims, in the dtypes it supports.
std::vector<CheckCase> random_cases(const ModelSpec& model, const Capabilities& caps, int count, uint64_t seed);

std::string describe(const CheckCase& c);

}  // namespace attnkit::harness
