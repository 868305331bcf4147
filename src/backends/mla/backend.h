// The `mla` backend (FlashMLA's role): absorbed Multi-head Latent Attention over the paged latent
// cache on Hopper. init_forward_metadata plans the batch once (plan.h) and uploads the plan; every
// layer stores its new latents and launches the attention kernel (decode, speculative verify and
// extend rows alike) and, where a row tile was split, the combine kernel (kernels/).
#pragma once

#include <vector>

#include "attnkit/backend.h"
#include "backends/mla/config.h"
#include "backends/mla/kernels/attend.h"
#include "backends/mla/plan.h"

namespace attnkit {

class MlaBackend final : public AttentionBackend {
 public:
  explicit MlaBackend(const BackendContext& context);
  std::string name() const override { return "mla"; }
  Capabilities capabilities() const override { return mla::capabilities(); }
  void synchronize() override;
  size_t workspace_bytes() const override;

  // The last plan (tests and benchmarks).
  const mla::Plan& last_plan() const { return plan_; }

 protected:
  void plan(const ForwardBatch& batch) override;
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;

 private:
  mla::PlanShape shape_;
  mla::Plan plan_;
  std::vector<mla::LatentMap> maps_;  // [num_layers] the latent pools' tensor maps
  // The upload: work list, merges, page table, out_cache_loc (i64 first, for alignment).
  Buffer arena_;
  size_t off_work_ = 0, off_merges_ = 0, off_pages_ = 0;
  Buffer partials_;  // partial_o [num_partials, 64, 512] f32, then partial_lse [num_partials, 64]
};

// Why the `mla` backend cannot run on this machine (no CUDA device, or not sm_90), or empty.
std::string mla_why_unavailable();

}  // namespace attnkit
