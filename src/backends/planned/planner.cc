#include "backends/planned/planner.h"

#include <utility>

#include "attnkit/error.h"

namespace attnkit::planned {

bool StepTracker::can_step(const ForwardBatch& batch) const {
  // A decode batch has no extend items to plan: one new token a request.
  return steppable_ && batch.mode == ForwardMode::decode && batch.custom_mask.empty();
}

bool StepTracker::is_next_step(const ForwardBatch& batch, const void* buffer, uint64_t generation) const {
  if (buffer_ == nullptr || buffer_ != buffer || generation_ != generation || steps_ >= max_steps_ ||
      !can_step(batch) || static_cast<size_t>(batch.batch_size()) != kv_lens_.size()) {
    return false;
  }
  for (int i = 0; i < batch.batch_size(); ++i) {
    if (batch.kv_len(i) != kv_lens_[static_cast<size_t>(i)] + 1) return false;
  }
  return true;
}

void StepTracker::planned_full(const ForwardBatch& batch, int max_steps, const void* buffer, uint64_t generation) {
  steps_ = 0;
  max_steps_ = can_step(batch) ? max_steps : 0;
  remember(batch, buffer, generation);
}

void StepTracker::planned_step(const ForwardBatch& batch, const void* buffer, uint64_t generation) {
  ++steps_;
  remember(batch, buffer, generation);
}

void StepTracker::remember(const ForwardBatch& batch, const void* buffer, uint64_t generation) {
  if (steps_ < max_steps_) {  // is_next_step reads the lengths only then
    kv_lens_.resize(static_cast<size_t>(batch.batch_size()));
    for (int i = 0; i < batch.batch_size(); ++i) kv_lens_[static_cast<size_t>(i)] = batch.kv_len(i);
  }
  buffer_ = buffer;
  generation_ = generation;
}

Planner::Planner(const PlanShape& grid, std::vector<int> windows)
    : grid_(grid),
      head_reps_(plan_head_reps(grid)),
      windows_(std::move(windows)),
      steps_(windows_.size() == 1 && windows_[0] < 0) {
  ATTNKIT_CHECK(!windows_.empty(), "planned: a model needs at least one layer");
  ATTNKIT_CHECK(windows_.size() <= static_cast<size_t>(PlanLayout::kMaxVariants), "planned: the model has ",
                windows_.size(), " distinct window_left values, at most ", PlanLayout::kMaxVariants,
                " are supported");
  share_ = share_shape(grid_, head_reps_);
}

void Planner::freeze_graph_buffer(int max_batch_size, int max_num_pages) {
  ATTNKIT_CHECK(max_batch_size >= 1, "planned init_cuda_graph_state: max_batch_size must be >= 1, got ", max_batch_size);
  ATTNKIT_CHECK(max_num_pages >= 1, "planned init_cuda_graph_state: max_num_pages must be >= 1, got ", max_num_pages);
  PlanCapacity c;
  c.batch_size = max_batch_size;
  c.num_pages = max_num_pages;
  c.num_tokens = max_batch_size;  // decode: one token a request
  c.decode_items = max_decode_items(max_batch_size, share_);
  graph_.freeze(c, share_, num_variants());
}

void Planner::plan(const ForwardBatch& batch, int num_cache_pages, cudaStream_t stream) {
  const PlanCapacity need = capacity_for(batch, share_);
  PlanArena* arena = &dynamic_;
  if (graph_.frozen() && batch.mode == ForwardMode::decode && batch.custom_mask.empty() &&
      graph_.capacity().fits(need)) {
    arena = &graph_;
  } else {
    dynamic_.reserve(need, share_, num_variants());
  }
  // The next decode step of the last plan keeps that plan on the device: the kernel takes the
  // moving parts (page offsets, the new key's chunk end) from the batch's arrays. Only they go up.
  const bool step = steps_.is_next_step(batch, arena, arena->generation());
  steps_.forget();
  std::byte* staging = arena->begin_write();
  const PlanLayout& layout = arena->layout();
  write_batch_arrays(batch, layout, staging);
  const size_t table_entries = arena->page_slots().write(
      batch, num_cache_pages, layout.page_table_entries, reinterpret_cast<int32_t*>(staging + layout.page_begin),
      reinterpret_cast<int32_t*>(staging + layout.kv_page_indices));
  num_prefill_items_ = 0;
  if (!step) plan_in_full(batch, *arena, staging, need.prefill_items > 0);
  arena->upload(step ? layout.qo_indptr : 0, layout.used_bytes(table_entries), stream);
  active_ = arena;

  if (step) {
    steps_.planned_step(batch, arena, arena->generation());
  } else {
    int max_steps = 0;
    if (steps_.can_step(batch)) {
      const DecodePlanView view = decode_view(layout, arena->capacity(), share_, 0, scratch_.data());
      max_steps = max_steps_between_plans(share_, view, stats_[0]);
    }
    steps_.planned_full(batch, max_steps, arena, arena->generation());
  }
}

void Planner::plan_in_full(const ForwardBatch& batch, PlanArena& arena, std::byte* staging, bool extend) {
  const PlanLayout& layout = arena.layout();
  if (scratch_.size() < layout.decode_sections_end()) scratch_.resize(layout.decode_sections_end());
  for (int v = 0; v < num_variants(); ++v) {
    const DecodePlanView view = decode_view(layout, arena.capacity(), share_, v, scratch_.data());
    stats_[v] = plan_decode(batch, share_, windows_[static_cast<size_t>(v)], view);
    copy_decode_plan(layout, share_, v, stats_[v], scratch_.data(), staging);
  }
  if (extend) {
    auto* items = reinterpret_cast<PrefillWorkItem*>(staging + layout.prefill_items);
    num_prefill_items_ = plan_prefill(batch, share_, {items, static_cast<size_t>(arena.capacity().prefill_items)});
  }
}

}  // namespace attnkit::planned
