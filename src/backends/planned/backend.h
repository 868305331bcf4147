// The `planned` backend: init_forward_metadata plans the batch on the host once (plan.h) and
// uploads the plan with the batch in one copy (graph_state.h); every layer's forward only launches:
// the extend kernel for requests with several new tokens, the decode kernel and its merge for
// requests with one. The kernels live in kernels/.
#pragma once

#include <vector>

#include "attnkit/backend.h"
#include "backends/planned/config.h"
#include "backends/planned/graph_state.h"
#include "backends/planned/plan.h"
#include "backends/planned/timeline.h"

namespace attnkit {

class PlannedBackend final : public AttentionBackend {
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
  const planned::DecodePlanStats& decode_stats(int variant = 0) const { return stats_[variant]; }
  // What the scheduler plans: one share of the KV heads, which the grid runs head_reps() times over.
  const planned::PlanShape& plan_shape() const { return plan_shape_; }
  int head_reps() const { return head_reps_; }
  int num_variants() const { return static_cast<int>(windows_.size()); }
  // Decode steps in a row that kept the last full plan (0: the last plan was a full one).
  int plan_steps() const { return last_.steps; }

 protected:
  void plan(const ForwardBatch& batch) override;
  bool plan_checks_page_indices() const override { return true; }  // PageTableSlots::write checks them
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;
  void run_decode(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override {
    run_extend(layer, q, k, v, out);  // one path: the plan already routed every request
  }

 private:
  // A decode batch without custom masks, and a model without windows: what a plan must be for the
  // next decode steps to keep it.
  bool can_step(const ForwardBatch& batch) const;
  // Whether `batch` is the next decode step of the last plan, written into `arena`: the same
  // requests, each one position longer, and steps left before the balance drifts too far.
  bool is_next_step(const ForwardBatch& batch, const planned::PlanArena& arena) const;

  // The last plan, which the next decode step may keep (max_steps_between_plans says what the
  // kernel then reads).
  struct LastPlan {
    const planned::PlanArena* arena = nullptr;  // null: none to derive from
    uint64_t generation = 0;
    std::vector<int32_t> kv_lens;  // the batch's history lengths
    int steps = 0;                 // plans derived since the last full one
    int max_steps = 0;             // max_steps_between_plans of that full one
  };

  planned::PlanShape shape_;       // the model's heads and the whole decode grid
  planned::PlanShape plan_shape_;  // one share of shape_'s KV heads and CTAs: what plans cover
  int head_reps_ = 1;              // shares: shape_.num_ctas / plan_shape_.num_ctas
  bool cooperative_ = false;       // decode launches may be cooperative (all_wait merges wait)
  std::vector<int> windows_;        // distinct window_left values; the plan has one variant each
  std::vector<int> layer_variant_;  // [num_layers] index into windows_
  std::vector<char> layer_sinks_;   // [num_layers] 1 where the layer has sinks
  planned::PlanArena dynamic_;      // grows with the batches
  planned::PlanArena graph_;        // frozen by init_cuda_graph_state
  planned::PlanArena* active_ = nullptr;
  planned::DecodePlanStats stats_[planned::PlanLayout::kMaxVariants];
  // The scheduler's output, laid out as the staging buffer's decode sections: the scheduler writes
  // here (lines this core keeps), and only the used part is copied into the staging buffer, whose
  // lines the last upload read (H200 host, 256 requests: the median good-pass plan 14.5 -> 14.05 us).
  std::vector<std::byte> plan_scratch_;
  int num_prefill_items_ = 0;
  Buffer merge_counters_;  // [head_reps, max_merges] int32, zero between launches
  // partial_o [head_reps * max_partials, kDecodeRows, head_dim], then partial_lse [..., kDecodeRows]
  Buffer partials_;
  Buffer sinks_;     // [num_layers, num_qo_heads] f32
  std::unique_ptr<planned::DecodeTimeline> timeline_;  // diagnostics; null unless asked for
  LastPlan last_;
};

}  // namespace attnkit
