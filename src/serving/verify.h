// --verify: one layer of a replayed step recomputed by `reference` on a CPU copy of that layer's
// cache, and every output element compared. The choice of steps to check is replay.cc's. A
// context-parallel group's caches are copied one after another (rank r's pages after rank r-1's),
// which is where a batch's global page ids point (ShareLayout), so `reference` attends the
// unsharded history.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"
#include "attnkit/tensor.h"

namespace attnkit::serving {

struct VerifyOutcome {
  double rel_err = 0.0;    // max |out - ref| / max |ref|
  double tolerance = 0.0;
  bool passed = false;
  std::string message;     // on failure: the worst element and both values
};

class StepVerifier {
 public:
  // `caches`: the replay's cache, or each rank's (any device, the same config); the verifier keeps
  // a one-layer host copy of them all.
  StepVerifier(std::vector<const KvCache*> caches, DType q_dtype);
  ~StepVerifier();

  // After the step ran: copies `layer`'s pools to the host, runs `reference` on the same batch and
  // inputs (host views) and compares with `out` (the backend's output, host view).
  VerifyOutcome check(const ForwardBatch& batch, const AttentionSpec& spec, int layer, const TensorView& q,
                      const TensorView& k, const TensorView& v, const TensorView& out);

 private:
  std::vector<const KvCache*> caches_;
  DType q_dtype_;
  std::unique_ptr<KvCache> host_cache_;
};

}  // namespace attnkit::serving
