// The `planned` backend's planner: for each batch it picks the plan buffer (the frozen one where a
// captured decode may replay the plan, else the one that grows), decides whether the batch is the
// next decode step of the last plan (then only the batch's moving parts go up), runs the scheduler
// (plan.h) for every window variant, stages the plan with the batch's arrays and queues the one
// upload. The backend then only reads what it planned and launches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnkit/batch.h"
#include "backends/planned/graph_state.h"
#include "backends/planned/plan.h"

namespace attnkit::planned {

// Whether a batch may keep the last plan: the same requests, each one position longer, while the
// plan's balance holds (max_steps_between_plans). Host-only bookkeeping, apart from the buffers it
// names, so it is tested without a GPU.
class StepTracker {
 public:
  // `steppable`: the model's layers share one plan variant without a window, the only plans the
  // decode kernel can carry forward.
  explicit StepTracker(bool steppable) : steppable_(steppable) {}

  // A decode batch without custom masks, on a steppable model.
  bool can_step(const ForwardBatch& batch) const;
  // Whether `batch` is the next step of the last plan, which went into `buffer` at `generation`.
  bool is_next_step(const ForwardBatch& batch, const void* buffer, uint64_t generation) const;
  // Before a plan is written: one that fails half-way is no base for the next.
  void forget() { buffer_ = nullptr; }
  // After a full plan that the next `max_steps` steps may keep (0: none may), or after a step.
  void planned_full(const ForwardBatch& batch, int max_steps, const void* buffer, uint64_t generation);
  void planned_step(const ForwardBatch& batch, const void* buffer, uint64_t generation);
  // Steps in a row that kept the last full plan (0: the last plan was a full one).
  int steps() const { return steps_; }

 private:
  void remember(const ForwardBatch& batch, const void* buffer, uint64_t generation);

  bool steppable_;
  const void* buffer_ = nullptr;  // null: nothing to derive from
  uint64_t generation_ = 0;
  std::vector<int32_t> kv_lens_;  // the last batch's history lengths (kept while steps remain)
  int steps_ = 0;
  int max_steps_ = 0;
};

class Planner {
 public:
  // `grid`: the whole decode grid; `windows`: the model's distinct window_left values, one plan
  // variant each (at most PlanLayout::kMaxVariants).
  Planner(const PlanShape& grid, std::vector<int> windows);

  // Freezes the second buffer for decode batches of up to max_batch_size requests and
  // max_num_pages pages (CUDA graphs): such batches are planned there from then on.
  void freeze_graph_buffer(int max_batch_size, int max_num_pages);
  // Plans `batch` (pages checked against `num_cache_pages`) and queues its upload on `stream`.
  void plan(const ForwardBatch& batch, int num_cache_pages, cudaStream_t stream);

  // The last plan.
  const PlanArena& arena() const { return *active_; }
  bool on_graph_buffer() const { return active_ == &graph_; }
  const DecodePlanStats& stats(int variant) const { return stats_[variant]; }
  int num_prefill_items() const { return num_prefill_items_; }
  int steps() const { return steps_.steps(); }

  const PlanShape& grid() const { return grid_; }
  const PlanShape& share() const { return share_; }  // one share of the KV heads: what plans cover
  int head_reps() const { return head_reps_; }        // shares: grid().num_ctas / share().num_ctas
  int num_variants() const { return static_cast<int>(windows_.size()); }
  size_t bytes() const { return dynamic_.bytes() + graph_.bytes(); }

 private:
  // The scheduler's decode plans of every variant and, with `extend`, the extend items.
  void plan_in_full(const ForwardBatch& batch, PlanArena& arena, std::byte* staging, bool extend);

  PlanShape grid_;
  PlanShape share_;
  int head_reps_ = 1;
  std::vector<int> windows_;
  PlanArena dynamic_;  // grows with the batches
  PlanArena graph_;    // frozen by freeze_graph_buffer
  PlanArena* active_ = nullptr;
  DecodePlanStats stats_[PlanLayout::kMaxVariants];
  // The scheduler's output, laid out as the staging buffer's decode sections: the scheduler writes
  // here (lines this core keeps), and only the used part is copied into the staging buffer, whose
  // lines the last upload read (H200 host, 256 requests: the median good-pass plan 14.5 -> 14.05 us).
  std::vector<std::byte> scratch_;
  int num_prefill_items_ = 0;
  StepTracker steps_;
};

}  // namespace attnkit::planned
