// PlannedBackend's kernel params for one layer: the plan's device sections, the layer's scalars
// and the backend's buffers.
#include "backends/planned/backend.h"

namespace attnkit {

planned::BatchArrays PlannedBackend::batch_arrays(int layer) const {
  const planned::PlanArena& arena = planner_.arena();
  const planned::PlanLayout& l = arena.layout();
  const bool has_mask = !batch().custom_mask.empty();
  planned::BatchArrays a;
  a.qo_indptr = arena.device<int32_t>(l.qo_indptr);
  a.kv_page_indices = arena.device<int32_t>(l.kv_page_indices);
  a.page_begin = arena.device<int32_t>(l.page_begin);
  a.kv_page_indptr = arena.device<int32_t>(l.kv_page_indptr);
  a.kv_last_page_len = arena.device<int32_t>(l.kv_last_page_len);
  a.prefix_lens = arena.device<int32_t>(l.prefix_lens);
  a.custom_mask = has_mask ? arena.device<uint8_t>(l.custom_mask) : nullptr;
  a.custom_mask_indptr = has_mask ? arena.device<int64_t>(l.custom_mask_indptr) : nullptr;
  a.sinks = layer_sinks(layer);
  return a;
}

planned::PrefillParams PlannedBackend::prefill_params(int layer, const TensorView& q, const TensorView& out) const {
  const ForwardBatch& b = batch();
  const planned::PlanArena& arena = planner_.arena();
  const planned::PlanLayout& l = arena.layout();
  planned::PrefillParams pre;
  static_cast<LayerParams&>(pre) = layer_params(layer);
  static_cast<planned::BatchArrays&>(pre) = batch_arrays(layer);
  pre.q = q.data;
  pre.out = out.data;
  pre.lse = lse_output().empty() ? nullptr : lse_output().as<float>();
  pre.k_pool = cache().k_pool(layer);
  pre.v_pool = cache().v_pool(layer);
  pre.work = arena.device<planned::PrefillWorkItem>(l.prefill_items);
  pre.num_work_items = planner_.num_prefill_items();
  pre.partial_o = nullptr;  // extend items are never split: no partials, no merge
  pre.partial_lse = nullptr;
  pre.batch_size = b.batch_size();
  pre.q_dtype = q.dtype;
  return pre;
}

planned::DecodeParams PlannedBackend::decode_params(int layer, const TensorView& q, const TensorView& out) const {
  const planned::PlanArena& arena = planner_.arena();
  const planned::PlanLayout& l = arena.layout();
  const planned::PlanShape& share = planner_.share();
  const int var = layer_variant_[static_cast<size_t>(layer)];
  const planned::DecodePlanStats& stats = planner_.stats(var);
  const bool graph = planner_.on_graph_buffer();
  planned::DecodeParams dec;
  static_cast<LayerParams&>(dec) = layer_params(layer);
  static_cast<planned::BatchArrays&>(dec) = batch_arrays(layer);
  dec.q = q.data;
  dec.out = out.data;
  dec.lse = lse_output().empty() ? nullptr : lse_output().as<float>();
  dec.k_pool = cache().k_pool(layer);
  dec.v_pool = cache().v_pool(layer);
  dec.cta_item_indptr = arena.device<int32_t>(l.cta_item_indptr[var]);
  dec.items = arena.device<planned::DecodeWorkItem>(l.decode_items[var]);
  dec.head_reps = head_reps();
  dec.rep_partials = planned::max_decode_partials(share);
  dec.rep_merges = planned::max_decode_merges(share);
  const size_t partial_rows = static_cast<size_t>(head_reps()) * dec.rep_partials * planned::kDecodeRows;
  dec.partial_o = static_cast<float*>(partials_.data());
  dec.partial_lse = dec.partial_o + partial_rows * static_cast<size_t>(share.head_dim);
  dec.merges = stats.num_merges > 0 || graph ? arena.device<planned::DecodeMergeItem>(l.merges[var]) : nullptr;
  dec.merge_counters = static_cast<int32_t*>(merge_counters_.data());
  dec.timeline = options().decode_timeline;
  dec.num_ctas = planner_.grid().num_ctas;
  // Cooperative only where a plan needs it (a captured graph may replay any plan).
  dec.cooperative = cooperative_ && (graph || stats.num_all_wait > 0) ? 1 : 0;
  dec.q_dtype = q.dtype;
  return dec;
}

}  // namespace attnkit
