// PlannedBackend: plan once per batch (planner.h: host scheduler + one upload), then per layer:
// store K/V, the extend kernel over the requests with several new tokens, the decode kernel (which
// also joins its splits) over the requests with one. Work goes to the calling thread's default stream.
#include "backends/planned/backend.h"

#include <algorithm>

#include "attnkit/registry.h"
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit {

namespace {

// The thread's default stream: capturable into a CUDA graph, and (blocking) ordered with the
// legacy default stream that other library code may use.
cudaStream_t stream() { return cudaStreamPerThread; }

static_assert(planned::kTimelineSlots == kDecodeTimelineSlots, "the timeline option's rows are the kernel's records");

}  // namespace

PlannedBackend::Layout PlannedBackend::layout_model(const BackendContext& context) {
  std::string why_not;
  ATTNKIT_CHECK(cuda_available(&why_not), "planned: ", why_not);
  const ModelSpec& model = *context.model;
  const KvCacheConfig& c = context.cache->config();
  Layout out;
  planned::PlanShape& grid = out.grid;
  grid.num_kv_heads = c.num_kv_heads;
  grid.head_dim = c.head_dim_k;
  grid.num_qo_heads = model.num_layers() > 0 ? model.layer(0).num_qo_heads : c.num_kv_heads;
  // The grid is sized for the likely q dtype (the cache's, or bf16 over e4m3); another q dtype
  // still runs, at most in a second wave. An unsupported shape is refused at plan time.
  const planned::KernelKey likely{grid.head_dim, c.dtype == DType::f16 ? DType::f16 : DType::bf16, c.dtype};
  int ctas_per_sm = 1;
  if (planned::why_unsupported(likely, c.page_size).empty() && !c.mla) {
    ctas_per_sm = std::max(1, planned::decode_ctas_per_sm(likely));
  }
  grid.num_ctas = planned::decode_grid_ctas(cuda::device_info().num_sms * ctas_per_sm, grid.num_kv_heads);
  if (planned::why_unsupported(likely, c.page_size).empty()) grid.prefill_rows = planned::prefill_tile_rows(grid.head_dim);
  grid.all_wait_joins = context.options.decode_join != BackendOptions::DecodeJoin::two_level;
  // Layers differ at most in window, sinks, soft-cap and scale: one plan variant per window.
  for (int l = 0; l < model.num_layers(); ++l) {
    const AttentionSpec& s = model.layer(l);
    ATTNKIT_CHECK(s.num_qo_heads == grid.num_qo_heads, "planned: every layer must have ", grid.num_qo_heads,
                  " query heads, layer ", l, " has ", s.num_qo_heads);
    auto it = std::find(out.windows.begin(), out.windows.end(), s.window_left);
    if (it == out.windows.end()) it = out.windows.insert(out.windows.end(), s.window_left);
    out.layer_variant.push_back(static_cast<int>(it - out.windows.begin()));
  }
  return out;
}

PlannedBackend::PlannedBackend(const BackendContext& context) : PlannedBackend(context, layout_model(context)) {}

PlannedBackend::PlannedBackend(const BackendContext& context, int prefill_rows)
    : PlannedBackend(context, [&] {
        Layout layout = layout_model(context);
        layout.grid.prefill_rows = prefill_rows;
        return layout;
      }()) {}

PlannedBackend::PlannedBackend(const BackendContext& context, Layout layout)
    : AttentionBackend(context),
      layer_variant_(std::move(layout.layer_variant)),
      cooperative_(context.options.decode_join == BackendOptions::DecodeJoin::all_wait),
      planner_(layout.grid, std::move(layout.windows)) {
  const int heads = planner_.grid().num_qo_heads;
  ATTNKIT_CHECK(options().decode_timeline == nullptr || planner_.grid().num_ctas <= kDecodeTimelineCtas,
                "planned: the decode grid has ", planner_.grid().num_ctas, " CTAs, more than the ",
                kDecodeTimelineCtas, " rows of BackendOptions::decode_timeline");
  std::vector<float> sinks(static_cast<size_t>(model().num_layers()) * heads, 0.0f);
  for (int l = 0; l < model().num_layers(); ++l) {
    const AttentionSpec& s = model().layer(l);
    layer_sinks_.push_back(!s.sinks.empty());
    if (s.sinks.empty()) continue;
    ATTNKIT_CHECK(static_cast<int>(s.sinks.size()) == heads, "planned: layer ", l, " has ", s.sinks.size(),
                  " sinks, expected num_qo_heads = ", heads);
    std::copy(s.sinks.begin(), s.sinks.end(), sinks.begin() + static_cast<std::ptrdiff_t>(l) * heads);
  }
  sinks_ = Buffer(Device::cuda, std::max<size_t>(sinks.size() * sizeof(float), 16));
  if (!sinks.empty()) sinks_.copy_from_host(sinks.data(), sinks.size() * sizeof(float));
  // Fixed-size split-KV partials: the bound holds for any batch, so graphs never see them move.
  const planned::PlanShape& share = planner_.share();
  const size_t rows = static_cast<size_t>(head_reps()) * planned::max_decode_partials(share) * planned::kDecodeRows;
  partials_ = Buffer(Device::cuda, std::max<size_t>(rows * (static_cast<size_t>(share.head_dim) + 1) * 4, 16));
  // The joins' counters start at zero; each joining CTA puts its own back to zero.
  const size_t counters = static_cast<size_t>(head_reps()) * planned::max_decode_merges(share);
  merge_counters_ = Buffer(Device::cuda, std::max<size_t>(counters * sizeof(int32_t), 16));
  ATTNKIT_CUDA_CHECK(cudaMemset(merge_counters_.data(), 0, merge_counters_.nbytes()));
}

void PlannedBackend::init_cuda_graph_state(int max_batch_size, int max_num_pages) {
  planner_.freeze_graph_buffer(max_batch_size, max_num_pages);
}

void PlannedBackend::synchronize() { ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

size_t PlannedBackend::workspace_bytes() const {
  return planner_.bytes() + partials_.nbytes() + merge_counters_.nbytes() + sinks_.nbytes();
}

void PlannedBackend::plan(const ForwardBatch& batch) { planner_.plan(batch, cache().config().num_pages, stream()); }

void PlannedBackend::check_extend(const planned::PrefillParams& p) const { planned::check_prefill_params(p); }

void PlannedBackend::launch_extend(int /*layer*/, const planned::PrefillParams& p, cudaStream_t s) {
  planned::launch_prefill(p, s);
}

void PlannedBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                                const TensorView& out) {
  const KvCacheConfig& c = cache().config();
  // Refused before any work (the cache store included), now that q's dtype is known.
  planned::select({model().layer(layer).head_dim_qk, q.dtype, c.dtype}, c.page_size, "forward");
  const ForwardBatch& b = batch();
  const planned::PlanArena& arena = planner_.arena();
  const int var = layer_variant_[static_cast<size_t>(layer)];
  const int num_items = planner_.stats(var).num_items;
  // A graph captured on the frozen buffer must launch the same kernels whatever plan it replays.
  const bool graph = planner_.on_graph_buffer();
  const bool prefill = planner_.num_prefill_items() > 0;
  int64_t* out_cache_loc = arena.device<int64_t>(arena.layout().out_cache_loc);
  // A decode-only batch whose K/V need no conversion is stored by the decode kernel itself (the
  // chunk that owns each request's new key writes it): one launch a layer instead of two.
  // (k empty: the caller stored the K/V already.)
  const bool store_in_decode = !prefill && (num_items > 0 || graph) && !k.empty() && k.dtype == c.dtype &&
                               v.dtype == c.dtype && c.dtype != DType::e4m3 && b.num_tokens() > 0;
  // Both kernels' params are checked before the cache is written.
  planned::PrefillParams pre;
  if (prefill) {
    pre = prefill_params(layer, q, out);
    check_extend(pre);
  }
  if (!store_in_decode) {
    store_new_kv(layer, k, v, TensorView(out_cache_loc, DType::i64, Device::cuda, {b.num_tokens()}));
  }
  if (prefill) launch_extend(layer, pre, stream());
  if (num_items == 0 && !graph) return;
  planned::DecodeParams dec = decode_params(layer, q, out);
  if (store_in_decode) {
    dec.new_k = k.data;
    dec.new_v = v.data;
    dec.out_cache_loc = out_cache_loc;
  }
  planned::launch_decode(dec, stream());
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
