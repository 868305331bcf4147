// MlaBackend: plan (host) and one upload per batch; per layer the latent store, the attention
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

std::string mla_why_unavailable() {
  std::string why;
  if (!cuda_available(&why)) return why;
  const cuda::DeviceInfo d = cuda::device_info();
  if (d.compute_major != 9) {
    return detail::concat("needs a Hopper GPU (sm_90: TMA and wgmma), this is ", d.name, " (sm_", d.compute_major,
                          d.compute_minor, ")");
  }
  return {};
}

MlaBackend::MlaBackend(const BackendContext& context) : AttentionBackend(context) {
  const std::string why = mla_why_unavailable();
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
  // The tensor maps are made once the page size is known to be served (a refused cache fails at plan).
  if (mla::why_unsupported(c.page_size, DType::bf16, c.dtype).empty()) {
    for (int l = 0; l < c.num_layers; ++l) maps_.push_back(mla::make_latent_map(cache().k_pool(l), c.num_slots(), c.page_size));
  }
}

void MlaBackend::synchronize() { ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

size_t MlaBackend::workspace_bytes() const { return arena_.nbytes() + partials_.nbytes(); }

void MlaBackend::plan(const ForwardBatch& batch) {
  const KvCacheConfig& c = cache().config();
  mla::check_supported(c.page_size, DType::bf16, c.dtype, "plan");
  plan_ = mla::make_plan(batch, shape_);
  // One upload: out_cache_loc, the work list, the merges, the page table.
  const size_t loc_bytes = batch.out_cache_loc.size() * sizeof(int64_t);
  off_work_ = align_up(loc_bytes);
  off_merges_ = off_work_ + align_up(plan_.work.size() * sizeof(mla::WorkItem));
  off_pages_ = off_merges_ + align_up(plan_.merges.size() * sizeof(mla::MergeItem));
  const size_t total = off_pages_ + align_up(batch.kv_page_indices.size() * sizeof(int32_t));
  std::vector<unsigned char> host(total, 0);
  std::memcpy(host.data(), batch.out_cache_loc.data(), loc_bytes);
  std::memcpy(host.data() + off_work_, plan_.work.data(), plan_.work.size() * sizeof(mla::WorkItem));
  std::memcpy(host.data() + off_merges_, plan_.merges.data(), plan_.merges.size() * sizeof(mla::MergeItem));
  std::memcpy(host.data() + off_pages_, batch.kv_page_indices.data(), batch.kv_page_indices.size() * sizeof(int32_t));
  if (arena_.nbytes() < total) arena_ = Buffer(Device::cuda, total + total / 2);
  arena_.copy_from_host(host.data(), total);
  const size_t partial_bytes = size_t(plan_.num_partials) * mla::kTileRows * (mla::kHeadDimVo + 1) * sizeof(float);
  if (partials_.nbytes() < partial_bytes) partials_ = Buffer(Device::cuda, partial_bytes + partial_bytes / 2);
}

void MlaBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out) {
  const KvCacheConfig& c = cache().config();
  // Refused before the cache store, now that q's dtype is known.
  mla::check_supported(c.page_size, q.dtype, c.dtype, "forward");
  const ForwardBatch& b = batch();
  auto* base = static_cast<unsigned char*>(arena_.data());
  cache().store(layer, k, v, TensorView(base, DType::i64, Device::cuda, {b.num_tokens()}));
  mla::AttendParams p;
  static_cast<LayerParams&>(p) = layer_params(layer);
  p.q = q.data;
  p.out = out.data;
  p.work = reinterpret_cast<const mla::WorkItem*>(base + off_work_);
  p.num_work = static_cast<int>(plan_.work.size());
  p.merges = reinterpret_cast<const mla::MergeItem*>(base + off_merges_);
  p.num_merges = static_cast<int>(plan_.merges.size());
  p.page_indices = reinterpret_cast<const int32_t*>(base + off_pages_);
  auto* partials = static_cast<float*>(partials_.data());
  p.partial_o = partials;
  p.partial_lse = partials ? partials + size_t(plan_.num_partials) * mla::kTileRows * mla::kHeadDimVo : nullptr;
  mla::launch_attend(p, maps_[static_cast<size_t>(layer)], stream());
}

void register_mla_backend(Registry& registry) {
  registry.add({.name = "mla",
                .description = "absorbed MLA over the paged latent cache: TMA tiles, wgmma, split-KV planned once a batch",
                .device = Device::cuda,
                .capabilities = mla::capabilities,
                .why_unavailable = mla_why_unavailable,
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<MlaBackend>(ctx);
                }});
}

}  // namespace attnkit
