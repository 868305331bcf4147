// The `reference` backend: ground truth for every test. CPU, fp64, everything the spec can express.
#pragma once

#include "attnkit/backend.h"
#include "backends/reference/config.h"

namespace attnkit {

class ReferenceBackend final : public AttentionBackend {
 public:
  using AttentionBackend::AttentionBackend;
  std::string name() const override { return "reference"; }
  Capabilities capabilities() const override { return reference::capabilities(); }

  // The last forward's natural-log LSE per [token, qo head] (sinks excluded), for merge tests.
  const std::vector<float>& last_lse() const { return lse_; }

 protected:
  void plan(const ForwardBatch&) override {}
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;

 private:
  std::vector<float> lse_;
};

}  // namespace attnkit
