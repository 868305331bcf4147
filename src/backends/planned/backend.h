// The `planned` backend: init_forward_metadata plans the batch on the host once (planner.h) and
// uploads the plan with the batch in one copy; every layer's forward only launches:
// the extend kernel for requests with several new tokens, the decode kernel and its merge for
// requests with one. The kernels live in kernels/.
#pragma once

#include <vector>

#include "attnkit/backend.h"
#include "backends/planned/config.h"
#include "backends/planned/kernels/decode.h"
#include "backends/planned/kernels/prefill.h"
#include "backends/planned/planner.h"

namespace attnkit {

class PlannedBackend : public AttentionBackend {
 public:
  explicit PlannedBackend(const BackendContext& context);
  std::string name() const override { return "planned"; }
  Capabilities capabilities() const override { return planned::capabilities(); }

  // Freezes a second plan buffer at fixed addresses for decode batches of up to max_batch_size
  // requests and max_num_pages pages: a forward_decode captured in a graph then replays any such
  // batch planned afterwards (same batch size: q and out keep their shapes). Other batches (extend,
  // custom masks, larger) are planned into the ordinary buffer and must not be replayed.
  void init_cuda_graph_state(int max_batch_size, int max_num_pages) override;
  void synchronize() override;
  size_t workspace_bytes() const override;

  // The last plan, per window variant (tests and benchmarks).
  const planned::DecodePlanStats& decode_stats(int variant = 0) const { return planner_.stats(variant); }
  // What the scheduler plans: one share of the KV heads, which the grid runs head_reps() times over.
  const planned::PlanShape& plan_shape() const { return planner_.share(); }
  int head_reps() const { return planner_.head_reps(); }
  int num_variants() const { return planner_.num_variants(); }
  // Decode steps in a row that kept the last full plan (0: the last plan was a full one).
  int plan_steps() const { return planner_.steps(); }

 protected:
  // For a backend that runs its own extend kernel over this plan and this decode kernel: the
  // extend work items then cover `prefill_rows` GQA-packed rows each.
  PlannedBackend(const BackendContext& context, int prefill_rows);
  // The extend kernel: its params checked (before the cache is written), then launched. A
  // backend that brings its own extend kernel replaces both.
  virtual void check_extend(const planned::PrefillParams& p) const;
  virtual void launch_extend(int layer, const planned::PrefillParams& p, cudaStream_t stream);

  void plan(const ForwardBatch& batch) override;
  bool plan_checks_page_indices() const override { return true; }  // PageTableSlots::write checks them
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;
  void run_decode(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override {
    run_extend(layer, q, k, v, out);  // one path: the plan already routed every request
  }

 private:
  struct Layout {  // what the constructor derives from the model once
    planned::PlanShape grid;
    std::vector<int> windows;        // distinct window_left values; the plan has one variant each
    std::vector<int> layer_variant;  // [num_layers] index into windows
  };
  static Layout layout_model(const BackendContext& context);
  PlannedBackend(const BackendContext& context, Layout layout);

  // The layer's [num_qo_heads] sinks on the device, or null.
  const float* layer_sinks(int layer) const {
    return layer_sinks_[static_cast<size_t>(layer)]
               ? static_cast<const float*>(sinks_.data()) + static_cast<size_t>(layer) * planner_.grid().num_qo_heads
               : nullptr;
  }
  planned::BatchArrays batch_arrays(int layer) const;
  planned::PrefillParams prefill_params(int layer, const TensorView& q, const TensorView& out) const;
  planned::DecodeParams decode_params(int layer, const TensorView& q, const TensorView& out) const;

  std::vector<int> layer_variant_;  // [num_layers] the plan variant (window) of each layer
  std::vector<char> layer_sinks_;   // [num_layers] 1 where the layer has sinks
  bool cooperative_ = false;        // decode launches may be cooperative (all_wait merges wait)
  planned::Planner planner_;
  Buffer merge_counters_;  // [head_reps, max_merges] int32, zero between launches
  // partial_o [head_reps * max_partials, kDecodeRows, head_dim], then partial_lse [..., kDecodeRows]
  Buffer partials_;
  Buffer sinks_;  // [num_layers, num_qo_heads] f32
};

}  // namespace attnkit
