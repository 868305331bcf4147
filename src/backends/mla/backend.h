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
#include "cuda/staged_upload.h"

namespace attnkit {

class MlaBackend final : public AttentionBackend {
 public:
  explicit MlaBackend(const BackendContext& context);
  std::string name() const override { return "mla"; }
  Capabilities capabilities() const override { return mla::capabilities(); }
  void synchronize() override;
  size_t workspace_bytes() const override;
  // Decode batches of up to max_batch_size tokens over up to max_num_pages pages plan into a
  // buffer that never moves, and launch fixed grids whose CTAs past the plan exit: a forward
  // captured into a CUDA graph replays any later plan within these bounds.
  void init_cuda_graph_state(int max_batch_size, int max_num_pages) override;

  // The last plan (tests and benchmarks), and whether it went to the graph buffer.
  const mla::Plan& last_plan() const { return plan_; }
  bool on_graph_buffer() const { return on_graph_; }

 protected:
  void plan(const ForwardBatch& batch) override;
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;

 private:
  mla::PlanShape shape_;
  mla::Plan plan_;
  std::vector<mla::LatentMap> maps_;  // [num_layers] the latent pools' tensor maps
  // What one plan needs on the device; a graph buffer is laid out for its bounds.
  struct Sizes {
    int64_t tokens = 0, work = 0, merges = 0, partials = 0, pages = 0;
    bool fit_in(const Sizes& bound) const {
      return tokens <= bound.tokens && work <= bound.work && merges <= bound.merges && partials <= bound.partials &&
             pages <= bound.pages;
    }
  };
  // One upload: counts (int32 [2]: work items, merges), out_cache_loc, work list, merges, page table.
  struct Layout {
    size_t loc = 0, work = 0, merges = 0, pages = 0, total = 0;
    Layout() = default;
    explicit Layout(const Sizes& n);
  };
  struct Arena {
    Buffer plan;      // Layout's bytes
    Buffer partials;  // partial_o [partials, 64, 512] f32, then partial_lse [partials, 64]
    Layout layout;
  };
  Arena dynamic_;
  Arena graph_;
  cuda::StagedUpload upload_;  // the plan's bytes, copied without waiting for the GPU
  Sizes graph_bounds_;  // all zero until init_cuda_graph_state
  bool on_graph_ = false;
};

// Why the `mla` backend cannot run on this machine (no CUDA device, or not sm_90), or empty.
std::string mla_why_unavailable();

}  // namespace attnkit
