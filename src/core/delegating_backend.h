// A backend that picks another backend at plan time and hands it every call (auto, hybrid pairs).
// The chosen backend validates each call again against its own capabilities.
#pragma once

#include "attnkit/backend.h"

namespace attnkit {

class DelegatingBackend : public AttentionBackend {
 public:
  using AttentionBackend::AttentionBackend;

 protected:
  // Which backend runs `batch`; called once per plan, the result gets the batch's plan.
  virtual AttentionBackend* choose(const ForwardBatch& batch) = 0;
  AttentionBackend* active() const { return active_; }

  void plan(const ForwardBatch& batch) final {
    active_ = choose(batch);
    active_->init_forward_metadata(batch);
  }
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) final {
    active_->forward_extend(layer, q, k, v, out, lse_output());
  }
  void run_decode(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) final {
    active_->forward_decode(layer, q, k, v, out, lse_output());
  }

 private:
  AttentionBackend* active_ = nullptr;
};

}  // namespace attnkit
