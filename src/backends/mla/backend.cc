// MlaBackend: plan (host) and one asynchronous upload per batch; per layer the latent store, the attention
// kernel and the combine of split row tiles, on the calling thread's default stream.
#include "backends/mla/backend.h"

#include <cstring>

#include "attnkit/registry.h"
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit {

namespace {

cudaStream_t stream() { return cudaStreamPerThread; }

size_t align_up(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

MlaBackend::MlaBackend(const BackendContext& context) : AttentionBackend(context) {
  const std::string why = cuda::why_not_hopper();
  ATTNKIT_CHECK(why.empty(), "mla: ", why);
  const KvCacheConfig& c = cache().config();
  ATTNKIT_CHECK(c.mla, "mla: the cache must be an MLA latent cache (KvCacheConfig::mla)");
  const AttentionSpec& s0 = model().layer(0);
  for (int l = 0; l < model().num_layers(); ++l) {
    const AttentionSpec& s = model().layer(l);
    ATTNKIT_CHECK(s.num_qo_heads == s0.num_qo_heads && s.causal == s0.causal && s.window_left == s0.window_left,
                  "mla: every layer must have the heads, causal flag and window of layer 0; layer ", l, " differs");
  }
  shape_.num_qo_heads = s0.num_qo_heads;
  shape_.causal = s0.causal;
  shape_.window_left = s0.window_left;
  shape_.num_ctas = cuda::device_info().num_sms;
  shape_.fp8_latent = c.latent_format == LatentFormat::fp8_blocked;
  // The tensor maps are made once the page size is known to be served (a refused cache fails at plan).
  if (mla::why_unsupported(c, DType::bf16).empty()) {
    for (int l = 0; l < c.num_layers; ++l) {
      maps_.push_back(mla::make_latent_map(cache().k_pool(l), c.num_slots(), c.page_size, shape_.fp8_latent));
    }
  }
}

void MlaBackend::synchronize() { ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

size_t MlaBackend::workspace_bytes() const {
  return dynamic_.plan.nbytes() + dynamic_.partials.nbytes() + graph_.plan.nbytes() + graph_.partials.nbytes();
}

MlaBackend::Layout::Layout(const Sizes& n) {
  loc = 256;  // after the counts
  work = loc + align_up(static_cast<size_t>(n.tokens) * sizeof(int64_t));
  merges = work + align_up(static_cast<size_t>(n.work) * sizeof(mla::WorkItem));
  pages = merges + align_up(static_cast<size_t>(n.merges) * sizeof(mla::MergeItem));
  total = pages + align_up(static_cast<size_t>(n.pages) * sizeof(int32_t));
}

namespace {

size_t partial_bytes(int64_t partials) {
  return static_cast<size_t>(partials) * mla::kTileRows * (mla::kHeadDimVo + 1) * sizeof(float);
}

}  // namespace

void MlaBackend::init_cuda_graph_state(int max_batch_size, int max_num_pages) {
  ATTNKIT_CHECK(max_batch_size >= 1, "mla init_cuda_graph_state: max_batch_size must be >= 1, got ", max_batch_size);
  ATTNKIT_CHECK(max_num_pages >= 1, "mla init_cuda_graph_state: max_num_pages must be >= 1, got ", max_num_pages);
  // A decode token's rows (its heads) span ceil(heads / tile rows) row tiles. The plan splits a row tile
  // into pieces of exactly `chunk` tiles, chunk >= total / num_ctas, and one shorter rest: at most
  // num_ctas full pieces in all plus one rest a row tile; every split piece has a partial.
  Sizes b;
  b.tokens = max_batch_size;
  const int tile_rows = mla::tile_rows_for(shape_.num_qo_heads, shape_.fp8_latent);
  const int64_t row_tiles = int64_t{max_batch_size} * ((shape_.num_qo_heads + tile_rows - 1) / tile_rows);
  b.work = row_tiles + shape_.num_ctas;
  b.merges = row_tiles;
  b.partials = b.work;
  b.pages = max_num_pages;
  graph_.layout = Layout(b);
  graph_.plan = Buffer(Device::cuda, graph_.layout.total);
  graph_.partials = Buffer(Device::cuda, partial_bytes(b.partials));
  graph_bounds_ = b;
}

void MlaBackend::plan(const ForwardBatch& batch) {
  cuda::check_not_capturing(stream(), "mla plan");  // before any allocation below
  const KvCacheConfig& c = cache().config();
  mla::check_supported(c, DType::bf16, "plan");
  plan_ = mla::make_plan(batch, shape_);
  Sizes need;
  need.tokens = batch.num_tokens();
  need.work = static_cast<int64_t>(plan_.work.size());
  need.merges = static_cast<int64_t>(plan_.merges.size());
  need.partials = plan_.num_partials;
  need.pages = static_cast<int64_t>(batch.kv_page_indices.size());
  on_graph_ = batch.mode == ForwardMode::decode && graph_.plan.nbytes() > 0 && need.fit_in(graph_bounds_);
  Arena& arena = on_graph_ ? graph_ : dynamic_;
  if (!on_graph_) {
    arena.layout = Layout(need);
    if (arena.plan.nbytes() < arena.layout.total) arena.plan = Buffer(Device::cuda, arena.layout.total * 3 / 2);
    const size_t pb = partial_bytes(need.partials);
    if (arena.partials.nbytes() < pb) arena.partials = Buffer(Device::cuda, pb * 3 / 2);
  }
  const Layout& l = arena.layout;
  // The page table is last: a graph layout's unused tail is not sent. The alignment gaps between
  // the sections are never read.
  const size_t bytes = l.pages + static_cast<size_t>(need.pages) * sizeof(int32_t);
  upload_.reserve(bytes);
  std::byte* host = upload_.begin_write();
  const int32_t counts[2] = {static_cast<int32_t>(need.work), static_cast<int32_t>(need.merges)};
  std::memcpy(host, counts, sizeof(counts));
  std::memcpy(host + l.loc, batch.out_cache_loc.data(), batch.out_cache_loc.size() * sizeof(int64_t));
  std::memcpy(host + l.work, plan_.work.data(), plan_.work.size() * sizeof(mla::WorkItem));
  std::memcpy(host + l.merges, plan_.merges.data(), plan_.merges.size() * sizeof(mla::MergeItem));
  std::memcpy(host + l.pages, batch.kv_page_indices.data(), batch.kv_page_indices.size() * sizeof(int32_t));
  upload_.upload(arena.plan.data(), 0, bytes, stream());
}

void MlaBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out) {
  const KvCacheConfig& c = cache().config();
  // Refused before the cache store, now that q's dtype is known.
  mla::check_supported(c, q.dtype, "forward");
  const ForwardBatch& b = batch();
  const Arena& arena = on_graph_ ? graph_ : dynamic_;
  const Layout& l = arena.layout;
  auto* base = static_cast<unsigned char*>(arena.plan.data());
  store_new_kv(layer, k, v, TensorView(base + l.loc, DType::i64, Device::cuda, {b.num_tokens()}));
  mla::AttendParams p;
  static_cast<LayerParams&>(p) = layer_params(layer);
  p.q = q.data;
  p.out = out.data;
  p.lse = lse_output().empty() ? nullptr : lse_output().as<float>();
  p.counts = reinterpret_cast<const int32_t*>(base);
  p.work = reinterpret_cast<const mla::WorkItem*>(base + l.work);
  p.merges = reinterpret_cast<const mla::MergeItem*>(base + l.merges);
  p.page_indices = reinterpret_cast<const int32_t*>(base + l.pages);
  // On the graph buffer the grids are the bounds, the same for every plan a graph replays.
  p.num_work = static_cast<int>(on_graph_ ? graph_bounds_.work : static_cast<int64_t>(plan_.work.size()));
  p.num_merges = static_cast<int>(on_graph_ ? graph_bounds_.merges : static_cast<int64_t>(plan_.merges.size()));
  const int64_t partials = on_graph_ ? graph_bounds_.partials : plan_.num_partials;
  auto* po = static_cast<float*>(arena.partials.data());
  p.partial_o = po;
  p.partial_lse = po ? po + static_cast<size_t>(partials) * mla::kTileRows * mla::kHeadDimVo : nullptr;
  p.tile_rows = plan_.tile_rows;
  p.fp8_latent = shape_.fp8_latent;
  mla::launch_attend(p, maps_[static_cast<size_t>(layer)], stream());
}

void register_mla_backend(Registry& registry) {
  registry.add({.name = "mla",
                .description = "absorbed MLA over the paged latent cache (bf16 or fp8_blocked): TMA tiles, wgmma, split-KV planned once a batch",
                .device = Device::cuda,
                .capabilities = mla::capabilities,
                .why_unavailable = cuda::why_not_hopper,
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<MlaBackend>(ctx);
                }});
}

}  // namespace attnkit
