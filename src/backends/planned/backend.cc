// PlannedBackend: plan once per batch (host scheduler + one upload), then per layer: store K/V,
// the extend kernel over the requests with several new tokens, the decode kernel (which also joins
// its splits) over the requests with one. Work goes to the calling thread's default stream.
#include "backends/planned/backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "attnkit/registry.h"
#include "backends/planned/kernels/decode.h"
#include "backends/planned/kernels/prefill.h"
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit {

namespace {

// The thread's default stream: capturable into a CUDA graph, and (blocking) ordered with the
// legacy default stream that other library code may use.
cudaStream_t stream() { return cudaStreamPerThread; }

}  // namespace

PlannedBackend::PlannedBackend(const BackendContext& context) : AttentionBackend(context) {
  std::string why_not;
  ATTNKIT_CHECK(cuda_available(&why_not), "planned: ", why_not);
  const KvCacheConfig& c = cache().config();
  shape_.num_kv_heads = c.num_kv_heads;
  shape_.head_dim = c.head_dim_k;
  shape_.num_qo_heads = model().num_layers() > 0 ? model().layer(0).num_qo_heads : c.num_kv_heads;
  // The grid is sized for the likely q dtype (the cache's, or bf16 over e4m3); another q dtype
  // still runs, at most in a second wave. An unsupported shape is refused at plan time.
  const DType likely_q = c.dtype == DType::f16 ? DType::f16 : DType::bf16;
  int ctas_per_sm = 1;
  const planned::KernelKey likely{shape_.head_dim, likely_q, c.dtype};
  if (planned::why_unsupported(likely, c.page_size).empty() && !c.mla) {
    ctas_per_sm = std::max(1, planned::decode_ctas_per_sm(likely));
  }
  shape_.num_ctas = planned::decode_grid_ctas(cuda::device_info().num_sms * ctas_per_sm, shape_.num_kv_heads);
  // Wide splits joined by all their CTAs in a cooperative launch. ATTNKIT_DECODE_ALL_WAIT (read
  // once here): 0 keeps the two-level joins and plain launches (an A/B switch); `plain` plans the
  // all-wait merges but launches plainly, so the last CTA to count joins them (what an instance
  // whose residency is below the grid does; tests reach that path with it).
  const char* all_wait = std::getenv("ATTNKIT_DECODE_ALL_WAIT");
  const bool off = all_wait != nullptr && std::strcmp(all_wait, "0") == 0;
  shape_.all_wait_joins = !off;
  cooperative_ = !off && !(all_wait != nullptr && std::strcmp(all_wait, "plain") == 0);
  head_reps_ = planned::plan_head_reps(shape_);
  plan_shape_ = planned::share_shape(shape_, head_reps_);

  // Layers differ at most in window, sinks, soft-cap and scale: one plan variant per window.
  std::vector<float> sinks(static_cast<size_t>(model().num_layers()) * shape_.num_qo_heads, 0.0f);
  for (int l = 0; l < model().num_layers(); ++l) {
    const AttentionSpec& s = model().layer(l);
    ATTNKIT_CHECK(s.num_qo_heads == shape_.num_qo_heads, "planned: every layer must have ", shape_.num_qo_heads,
                  " query heads, layer ", l, " has ", s.num_qo_heads);
    auto it = std::find(windows_.begin(), windows_.end(), s.window_left);
    if (it == windows_.end()) it = windows_.insert(windows_.end(), s.window_left);
    layer_variant_.push_back(static_cast<int>(it - windows_.begin()));
    layer_sinks_.push_back(!s.sinks.empty());
    if (!s.sinks.empty()) {
      ATTNKIT_CHECK(static_cast<int>(s.sinks.size()) == shape_.num_qo_heads, "planned: layer ", l, " has ",
                    s.sinks.size(), " sinks, expected num_qo_heads = ", shape_.num_qo_heads);
      std::copy(s.sinks.begin(), s.sinks.end(), sinks.begin() + static_cast<std::ptrdiff_t>(l) * shape_.num_qo_heads);
    }
  }
  ATTNKIT_CHECK(windows_.size() <= static_cast<size_t>(planned::PlanLayout::kMaxVariants), "planned: the model has ",
                windows_.size(), " distinct window_left values, at most ", planned::PlanLayout::kMaxVariants,
                " are supported");
  sinks_ = Buffer(Device::cuda, std::max<size_t>(sinks.size() * sizeof(float), 16));
  if (!sinks.empty()) sinks_.copy_from_host(sinks.data(), sinks.size() * sizeof(float));
  // Fixed-size split-KV partials: the bound holds for any batch, so graphs never see them move.
  const size_t rows = static_cast<size_t>(head_reps_) * planned::max_decode_partials(plan_shape_) * planned::kDecodeRows;
  partials_ = Buffer(Device::cuda, std::max<size_t>(rows * (static_cast<size_t>(shape_.head_dim) + 1) * 4, 16));
  // The joins' counters start at zero; each joining CTA puts its own back to zero.
  const size_t counters = static_cast<size_t>(head_reps_) * planned::max_decode_merges(plan_shape_);
  merge_counters_ = Buffer(Device::cuda, std::max<size_t>(counters * sizeof(int32_t), 16));
  ATTNKIT_CUDA_CHECK(cudaMemset(merge_counters_.data(), 0, merge_counters_.nbytes()));
  timeline_ = planned::DecodeTimeline::from_environment(shape_.num_ctas);
}

void PlannedBackend::init_cuda_graph_state(int max_batch_size, int max_num_pages) {
  ATTNKIT_CHECK(max_batch_size >= 1, "planned init_cuda_graph_state: max_batch_size must be >= 1, got ", max_batch_size);
  ATTNKIT_CHECK(max_num_pages >= 1, "planned init_cuda_graph_state: max_num_pages must be >= 1, got ", max_num_pages);
  planned::PlanCapacity c;
  c.batch_size = max_batch_size;
  c.num_pages = max_num_pages;
  c.num_tokens = max_batch_size;  // decode: one token a request
  c.decode_items = planned::max_decode_items(max_batch_size, plan_shape_);
  graph_.freeze(c, plan_shape_, num_variants());
}

void PlannedBackend::synchronize() { ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

size_t PlannedBackend::workspace_bytes() const {
  return dynamic_.bytes() + graph_.bytes() + partials_.nbytes() + merge_counters_.nbytes() + sinks_.nbytes();
}

void PlannedBackend::plan(const ForwardBatch& batch) {
  const planned::PlanCapacity need = planned::capacity_for(batch, plan_shape_);
  planned::PlanArena* arena = &dynamic_;
  if (graph_.frozen() && batch.mode == ForwardMode::decode && batch.custom_mask.empty() &&
      graph_.capacity().fits(need)) {
    arena = &graph_;
  } else {
    dynamic_.reserve(need, plan_shape_, num_variants());
  }
  // The next decode step of the last plan keeps that plan on the device: the kernel takes the
  // moving parts (page offsets, the new key's chunk end) from the batch's arrays. Only they go up.
  const bool step = is_next_step(batch, *arena);
  last_.arena = nullptr;  // a plan that fails half-way is no base for the next one
  std::byte* staging = arena->begin_write();
  const planned::PlanLayout& layout = arena->layout();
  planned::write_batch_arrays(batch, layout, staging);
  const size_t table_entries = arena->page_slots().write(
      batch, cache().config().num_pages, layout.page_table_entries, reinterpret_cast<int32_t*>(staging + layout.page_begin),
      reinterpret_cast<int32_t*>(staging + layout.kv_page_indices));
  num_prefill_items_ = 0;
  if (!step) {
    if (plan_scratch_.size() < layout.decode_sections_end()) plan_scratch_.resize(layout.decode_sections_end());
    for (int v = 0; v < num_variants(); ++v) {
      const planned::DecodePlanView view =
          planned::decode_view(layout, arena->capacity(), plan_shape_, v, plan_scratch_.data());
      stats_[v] = planned::plan_decode(batch, plan_shape_, windows_[static_cast<size_t>(v)], view);
      planned::copy_decode_plan(layout, plan_shape_, v, stats_[v], plan_scratch_.data(), staging);
      if (timeline_) timeline_->set_plan(v, view.cta_item_indptr, view.items, head_reps_);
    }
    if (need.prefill_items > 0) {
      auto* items = reinterpret_cast<planned::PrefillWorkItem*>(staging + layout.prefill_items);
      num_prefill_items_ =
          planned::plan_prefill(batch, plan_shape_, {items, static_cast<size_t>(arena->capacity().prefill_items)});
    }
  }
  arena->upload(step ? layout.qo_indptr : 0, layout.used_bytes(table_entries), stream());
  active_ = arena;

  // What the next decode step's plan may be derived from.
  if (step) {
    ++last_.steps;
  } else {
    last_.steps = 0;
    last_.max_steps = 0;
    if (can_step(batch)) {
      const planned::DecodePlanView view =
          planned::decode_view(layout, arena->capacity(), plan_shape_, 0, plan_scratch_.data());
      last_.max_steps = planned::max_steps_between_plans(plan_shape_, view, stats_[0]);
    }
  }
  if (last_.steps < last_.max_steps) {  // is_next_step reads the lengths only then
    const int n = batch.batch_size();
    last_.kv_lens.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) last_.kv_lens[static_cast<size_t>(i)] = batch.kv_len(i);
  }
  last_.arena = arena;
  last_.generation = arena->generation();
}

bool PlannedBackend::can_step(const ForwardBatch& batch) const {
  // A decode batch has no extend items to plan: one new token a request.
  return batch.mode == ForwardMode::decode && batch.custom_mask.empty() && num_variants() == 1 && windows_[0] < 0;
}

bool PlannedBackend::is_next_step(const ForwardBatch& batch, const planned::PlanArena& arena) const {
  if (last_.arena != &arena || last_.generation != arena.generation() || last_.steps >= last_.max_steps ||
      !can_step(batch) || static_cast<size_t>(batch.batch_size()) != last_.kv_lens.size()) {
    return false;
  }
  for (int i = 0; i < batch.batch_size(); ++i) {
    if (batch.kv_len(i) != last_.kv_lens[static_cast<size_t>(i)] + 1) return false;
  }
  return true;
}

void PlannedBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& out) {
  const AttentionSpec& spec = model().layer(layer);
  const KvCacheConfig& c = cache().config();
  const ForwardBatch& b = batch();
  const planned::PlanLayout& l = active_->layout();
  // Refused before any work (the cache store included), now that q's dtype is known.
  planned::select({spec.head_dim_qk, q.dtype, c.dtype}, c.page_size, "forward");

  const bool fp8 = c.dtype == DType::e4m3;
  const bool has_mask = !b.custom_mask.empty();
  const float* sinks = layer_sinks_[static_cast<size_t>(layer)]
                           ? static_cast<const float*>(sinks_.data()) + static_cast<size_t>(layer) * shape_.num_qo_heads
                           : nullptr;
  const uint8_t* mask = has_mask ? active_->device<uint8_t>(l.custom_mask) : nullptr;
  const int64_t* mask_indptr = has_mask ? active_->device<int64_t>(l.custom_mask_indptr) : nullptr;

  planned::PrefillParams pre;
  if (num_prefill_items_ > 0) {
    pre.q = q.data;
    pre.out = out.data;
    pre.lse = nullptr;
    pre.k_pool = cache().k_pool(layer);
    pre.v_pool = cache().v_pool(layer);
    pre.qo_indptr = active_->device<int32_t>(l.qo_indptr);
    pre.kv_page_indptr = active_->device<int32_t>(l.kv_page_indptr);
    pre.kv_page_indices = active_->device<int32_t>(l.kv_page_indices);
    pre.page_begin = active_->device<int32_t>(l.page_begin);
    pre.kv_last_page_len = active_->device<int32_t>(l.kv_last_page_len);
    pre.prefix_lens = active_->device<int32_t>(l.prefix_lens);
    pre.custom_mask = mask;
    pre.custom_mask_indptr = mask_indptr;
    pre.sinks = sinks;
    pre.work = active_->device<planned::PrefillWorkItem>(l.prefill_items);
    pre.num_work_items = num_prefill_items_;
    pre.partial_o = nullptr;  // extend items are never split: no partials, no merge
    pre.partial_lse = nullptr;
    pre.batch_size = b.batch_size();
    pre.num_qo_heads = spec.num_qo_heads;
    pre.num_kv_heads = spec.num_kv_heads;
    pre.head_dim = spec.head_dim_qk;
    pre.page_size = c.page_size;
    pre.sm_scale = spec.scale();
    pre.logits_soft_cap = spec.logits_soft_cap;
    pre.window_left = spec.window_left;
    pre.causal = spec.causal;
    pre.k_scale = fp8 ? c.k_scale : 1.0f;
    pre.v_scale = fp8 ? c.v_scale : 1.0f;
    pre.q_dtype = q.dtype;
    pre.kv_dtype = c.dtype;
    planned::check_prefill_params(pre);
  }

  const int var = layer_variant_[static_cast<size_t>(layer)];
  // A graph captured on the frozen buffer must launch the same kernels whatever plan it replays.
  const bool graph = active_ == &graph_;
  int64_t* out_cache_loc = active_->device<int64_t>(l.out_cache_loc);
  // A decode-only batch whose K/V need no conversion is stored by the decode kernel itself (the
  // chunk that owns each request's new key writes it): one launch a layer instead of two.
  const bool store_in_decode = num_prefill_items_ == 0 && (stats_[var].num_items > 0 || graph) &&
                               k.dtype == c.dtype && v.dtype == c.dtype && !fp8 && b.num_tokens() > 0;
  if (!store_in_decode) {
    cache().store(layer, k, v, TensorView(out_cache_loc, DType::i64, Device::cuda, {b.num_tokens()}));
  }
  if (num_prefill_items_ > 0) planned::launch_prefill(pre, stream());

  if (stats_[var].num_items == 0 && !graph) return;
  planned::DecodeParams dec;
  dec.q = q.data;
  dec.out = out.data;
  dec.k_pool = cache().k_pool(layer);
  dec.v_pool = cache().v_pool(layer);
  dec.kv_page_indices = active_->device<int32_t>(l.kv_page_indices);
  dec.page_begin = active_->device<int32_t>(l.page_begin);
  dec.kv_page_indptr = active_->device<int32_t>(l.kv_page_indptr);
  dec.kv_last_page_len = active_->device<int32_t>(l.kv_last_page_len);
  dec.custom_mask = mask;
  dec.custom_mask_indptr = mask_indptr;
  dec.sinks = sinks;
  if (store_in_decode) {
    dec.new_k = k.data;
    dec.new_v = v.data;
    dec.out_cache_loc = out_cache_loc;
  }
  dec.cta_item_indptr = active_->device<int32_t>(l.cta_item_indptr[var]);
  dec.items = active_->device<planned::DecodeWorkItem>(l.decode_items[var]);
  dec.head_reps = head_reps_;
  dec.rep_partials = planned::max_decode_partials(plan_shape_);
  dec.rep_merges = planned::max_decode_merges(plan_shape_);
  const size_t partial_rows = static_cast<size_t>(head_reps_) * dec.rep_partials * planned::kDecodeRows;
  dec.partial_o = static_cast<float*>(partials_.data());
  dec.partial_lse = dec.partial_o + partial_rows * static_cast<size_t>(shape_.head_dim);
  const bool merge = stats_[var].num_merges > 0 || graph;
  dec.merges = merge ? active_->device<planned::DecodeMergeItem>(l.merges[var]) : nullptr;
  dec.merge_counters = static_cast<int32_t*>(merge_counters_.data());
  dec.num_ctas = shape_.num_ctas;
  // Cooperative only where a plan needs it (a captured graph may replay any plan).
  dec.cooperative = cooperative_ && (graph || stats_[var].num_all_wait > 0) ? 1 : 0;
  dec.num_qo_heads = spec.num_qo_heads;
  dec.num_kv_heads = spec.num_kv_heads;
  dec.head_dim = spec.head_dim_qk;
  dec.page_size = c.page_size;
  dec.sm_scale = spec.scale();
  dec.logits_soft_cap = spec.logits_soft_cap;
  dec.k_scale = fp8 ? c.k_scale : 1.0f;
  dec.v_scale = fp8 ? c.v_scale : 1.0f;
  dec.q_dtype = q.dtype;
  dec.kv_dtype = c.dtype;
  if (timeline_) dec.timeline = timeline_->begin(stream());
  planned::launch_decode(dec, stream());
  if (timeline_) timeline_->write_after(stream(), var);
}

void register_planned_backend(Registry& registry) {
  registry.add({.name = "planned",
                .description = "plan/run: a host scheduler balances paged split-KV work across SMs, reused by every layer",
                .device = Device::cuda,
                .capabilities = planned::capabilities,
                .why_unavailable = [] {
                  std::string why;
                  return cuda_available(&why) ? std::string() : why;
                },
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<PlannedBackend>(ctx);
                }});
}

}  // namespace attnkit
