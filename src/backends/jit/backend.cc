#include "backends/jit/backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "attnkit/registry.h"
#include "backends/jit/config.h"
#include "backends/jit/module_cache.h"
#include "backends/jit/nvrtc.h"
#include "backends/jit/tuner.h"
#include "cuda/memory.h"
#include "cuda/check.h"

namespace attnkit {

std::string jit::why_unavailable() {
  std::string why;
  if (!cuda_available(&why)) return why;
  if (Nvrtc::get(&why) == nullptr) return why;
  return {};
}

namespace {

cudaStream_t stream() { return cudaStreamPerThread; }
size_t align_up(size_t n) { return (n + 255) / 256 * 256; }
// A batch is decode-shaped where every request brings at most one warp's 16 packed query rows.
constexpr int kDecodeRows = 16;

// Keeps a buffer at least `bytes` large; the old one is freed only after the stream's work on it.
void reserve(Buffer& buffer, size_t bytes) {
  if (buffer.nbytes() >= bytes) return;
  ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream()));
  buffer = Buffer(Device::cuda, bytes + bytes / 2);
}

}  // namespace

JitBackend::JitBackend(const BackendContext& context) : AttentionBackend(context) {
  const std::string why = jit::why_unavailable();
  ATTNKIT_CHECK(why.empty(), "jit: ", why);
  num_sms_ = cuda::device_info().num_sms;
  for (int l = 0; l < model().num_layers(); ++l) {
    const AttentionSpec& s = model().layer(l);
    max_group_ = std::max(max_group_, s.group_size());
    Buffer sinks;
    if (!s.sinks.empty()) {
      sinks = Buffer(Device::cuda, s.sinks.size() * sizeof(float));
      sinks.copy_from_host(s.sinks.data(), s.sinks.size() * sizeof(float));
    }
    sinks_.push_back(std::move(sinks));
  }
}

Capabilities JitBackend::capabilities() const { return jit::capabilities(); }

void JitBackend::synchronize() { ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream())); }

size_t JitBackend::workspace_bytes() const {
  size_t n = arena_.nbytes() + partials_.nbytes();
  for (const auto& [_, w] : works_) n += w.items.nbytes() + w.tile_flags.nbytes();
  return n;
}

const jit::KernelKey& JitBackend::key(int layer, DType q_dtype) {
  const size_t slot = layer_slot(layer, q_dtype);
  if (keys_.size() <= slot) keys_.resize(static_cast<size_t>(model().num_layers()) * 2);
  if (!keys_[slot]) keys_[slot] = jit::kernel_key_for(model().layer(layer), cache().config(), q_dtype);
  return *keys_[slot];
}

void JitBackend::plan(const ForwardBatch& batch) {
  const size_t tokens = static_cast<size_t>(batch.num_tokens());
  const size_t requests = static_cast<size_t>(batch.batch_size());
  off_token_request_ = align_up(tokens * sizeof(int64_t));
  off_requests_ = off_token_request_ + align_up(tokens * sizeof(int32_t));
  off_pages_ = off_requests_ + align_up(requests * 4 * sizeof(int32_t));
  const size_t total = off_pages_ + batch.kv_page_indices.size() * sizeof(int32_t);
  std::vector<unsigned char> host(total, 0);
  std::memcpy(host.data(), batch.out_cache_loc.data(), tokens * sizeof(int64_t));
  auto* token_request = reinterpret_cast<int32_t*>(host.data() + off_token_request_);
  auto* info = reinterpret_cast<int32_t*>(host.data() + off_requests_);
  work_requests_.clear();
  int max_q = 0;
  int64_t kv_tokens = 0;
  for (size_t i = 0; i < requests; ++i) {
    const int r = static_cast<int>(i);
    for (int32_t t = batch.qo_indptr[i]; t < batch.qo_indptr[i + 1]; ++t) token_request[t] = r;
    info[4 * i + 0] = batch.qo_indptr[i];
    info[4 * i + 1] = batch.prefix_lens[i];
    info[4 * i + 2] = batch.kv_len(r);
    info[4 * i + 3] = batch.kv_page_indptr[i];
    const int q_len = batch.qo_indptr[i + 1] - batch.qo_indptr[i];
    work_requests_.push_back({static_cast<int>(batch.prefix_lens[i]), q_len});
    max_q = std::max(max_q, q_len);
    kv_tokens += batch.kv_len(r);
  }
  std::memcpy(host.data() + off_pages_, batch.kv_page_indices.data(), batch.kv_page_indices.size() * sizeof(int32_t));
  reserve(arena_, total);
  arena_.copy_from_host(host.data(), total);
  decode_shaped_ = max_q * max_group_ <= kDecodeRows;
  bucket_ = jit::shape_bucket(decode_shaped_, batch.num_tokens(), kv_tokens);
  ++generation_;
  std::fill(layer_tuned_.begin(), layer_tuned_.end(), nullptr);
}

const JitBackend::Work& JitBackend::work(int layer, const jit::KernelKey& key, const jit::CompiledKernel& kernel) {
  const LayerParams& lp = layer_params(layer);
  const jit::TileConfig& tile = key.tile;
  jit::WorkShape shape;
  shape.group = lp.num_qo_heads / lp.num_kv_heads;
  shape.block_m = tile.block_m();
  shape.block_n = tile.block_n;
  shape.causal = lp.causal;
  shape.window_left = lp.window_left;
  shape.num_kv_heads = lp.num_kv_heads;
  // A work item is vo_passes CTAs: the splits fill the GPU with that many fewer items.
  shape.target_ctas = std::max(1, num_sms_ * std::max(1, kernel.ctas_per_sm) / kernel.vo_passes);
  const std::string name = detail::concat(shape.group, " ", shape.block_m, " ", shape.block_n, " ", shape.causal, " ",
                                          shape.window_left, " ", shape.num_kv_heads, " ", shape.target_ctas, " ",
                                          key.mask_mod);
  Work& w = works_[name];
  if (w.generation == generation_) return w;
  const jit::WorkPlan plan = jit::plan_work(work_requests_, shape);
  std::vector<int32_t> all = plan.items;
  all.insert(all.end(), plan.merges.begin(), plan.merges.end());
  reserve(w.items, all.size() * sizeof(int32_t));
  if (!all.empty()) w.items.copy_from_host(all.data(), all.size() * sizeof(int32_t));
  w.num_items = plan.num_items();
  w.num_merges = plan.num_merges();
  w.partial_rows = plan.partial_rows;
  w.generation = generation_;
  reserve(partials_, static_cast<size_t>(plan.partial_rows) * lp.num_kv_heads * (lp.head_dim_vo + 1) * sizeof(float));
  if (kernel.tile_mask != nullptr && plan.num_items() > 0) {
    reserve(w.tile_flags, static_cast<size_t>(plan.tiles) * lp.num_kv_heads + 1);
    const void* items = w.items.data();
    const void* requests = static_cast<unsigned char*>(arena_.data()) + off_requests_;
    void* flags = w.tile_flags.data();
    int window_left = lp.window_left, causal = lp.causal ? 1 : 0;
    void* args[] = {&items, &requests, &flags, &window_left, &causal};
    const dim3 grid(static_cast<unsigned>(plan.num_items()), static_cast<unsigned>(lp.num_kv_heads));
    ATTNKIT_CUDA_CHECK(cudaLaunchKernel(kernel.tile_mask, grid, dim3(128), args, 0, stream()));
  }
  return w;
}

JitBackend::LaunchArgs JitBackend::launch_args(int layer, const TensorView& q, const TensorView& out) const {
  const LayerParams& lp = layer_params(layer);
  auto* base = static_cast<unsigned char*>(arena_.data());
  const Buffer& sinks = sinks_[static_cast<size_t>(layer)];
  return {q.data, out.data, cache().k_pool(layer), cache().v_pool(layer), base + off_token_request_,
          base + off_requests_, base + off_pages_, sinks.nbytes() ? sinks.data() : nullptr, lp.sm_scale,
          lp.logits_soft_cap, lp.window_left, lp.causal ? 1 : 0};
}

void JitBackend::launch_mma_tile(int layer, const jit::CompiledKernel& kernel, const Work& w, const TensorView& q,
                                 const TensorView& out) {
  if (w.num_items == 0) return;
  const LayerParams& lp = layer_params(layer);
  LaunchArgs a = launch_args(layer, q, out);
  const void* items = w.items.data();
  const void* merges = static_cast<const int32_t*>(w.items.data()) + static_cast<size_t>(w.num_items) * jit::WorkPlan::kStride;
  void* o_part = partials_.data();
  void* lse_part = static_cast<float*>(partials_.data()) + static_cast<size_t>(w.partial_rows) * lp.num_kv_heads * lp.head_dim_vo;
  const void* tile_flags = w.tile_flags.nbytes() ? w.tile_flags.data() : nullptr;
  void* args[] = {&a.q, &a.out, &a.k_pool, &a.v_pool, &items, &a.requests, &a.pages, &a.sinks, &o_part, &lse_part,
                  &a.sm_scale, &a.soft_cap, &a.window_left, &a.causal, &tile_flags};
  const dim3 grid(static_cast<unsigned>(w.num_items), static_cast<unsigned>(lp.num_kv_heads),
                  static_cast<unsigned>(kernel.vo_passes));
  kernel.smem_opt_in->ensure(kernel.entry, static_cast<int>(kernel.smem_bytes));  // once a device
  ATTNKIT_CUDA_CHECK(cudaLaunchKernel(kernel.entry, grid, dim3(kernel.threads), args, kernel.smem_bytes, stream()));
  if (w.num_merges == 0) return;
  void* merge_args[] = {&a.out, &o_part, &lse_part, &merges, &a.requests, &a.sinks};
  // Programmatic dependent launch (sm_90+, where the source carries griddepcontrol): without it the
  // merge's CTAs start only once attend's grid has drained, after a launch gap that a long split
  // decode pays on every layer. With it they may be scheduled as soon as every attend CTA has
  // reached its epilogue (griddepcontrol.launch_dependents) and each waits (griddepcontrol.wait)
  // until attend's grid has completed and its partials are visible: the gap is hidden, the order
  // kept. Kernels after the merge wait for it in stream order as before. Under stream capture
  // (CUDA 12.3+) the attribute becomes a programmatic edge of the graph, with the same meaning.
  cudaLaunchAttribute pdl{};
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(w.num_merges), static_cast<unsigned>(lp.num_kv_heads));
  config.blockDim = dim3(128);
  config.stream = stream();
  config.attrs = kernel.pdl ? &pdl : nullptr;
  config.numAttrs = kernel.pdl ? 1 : 0;
  ATTNKIT_CUDA_CHECK(cudaLaunchKernelExC(&config, kernel.merge, merge_args));
}

void JitBackend::launch_warp_row(int layer, const jit::CompiledKernel& kernel, const TensorView& q,
                                 const TensorView& out) {
  LaunchArgs a = launch_args(layer, q, out);
  void* args[] = {&a.q, &a.out, &a.k_pool, &a.v_pool, &a.token_request, &a.requests, &a.pages, &a.sinks,
                  &a.sm_scale, &a.soft_cap, &a.window_left, &a.causal};
  const dim3 grid(static_cast<unsigned>(batch().num_tokens()), static_cast<unsigned>(layer_params(layer).num_kv_heads));
  ATTNKIT_CUDA_CHECK(cudaLaunchKernel(kernel.entry, grid, dim3(kernel.threads), args, 0, stream()));
}

const JitBackend::Tuned& JitBackend::tuned(const std::string& name, int layer, const jit::KernelKey& base,
                                           const TensorView& q, const TensorView& out) {
  if (auto it = tuned_.find(name); it != tuned_.end()) return it->second;
  // Each candidate timed on this layer's real call: two launches to warm, the median of five; its
  // output then checked against the first candidate's (the tuner measures them in order).
  std::vector<uint16_t> first_out;
  const auto measure = [&](const jit::TileConfig& t) -> double {
    jit::KernelKey k = base;
    k.tile = t;
    const jit::CompiledKernel& kernel = jit::ModuleCache::global().get(k);
    if (kernel.ctas_per_sm == 0) return std::numeric_limits<double>::infinity();  // does not fit an SM here
    const Work& w = work(layer, k, kernel);
    cudaEvent_t start = nullptr, stop = nullptr;
    ATTNKIT_CUDA_CHECK(cudaEventCreate(&start));
    ATTNKIT_CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<float> ms;
    for (int i = 0; i < 7; ++i) {
      ATTNKIT_CUDA_CHECK(cudaEventRecord(start, stream()));
      launch_mma_tile(layer, kernel, w, q, out);
      ATTNKIT_CUDA_CHECK(cudaEventRecord(stop, stream()));
      ATTNKIT_CUDA_CHECK(cudaEventSynchronize(stop));
      float t_ms = 0.0f;
      ATTNKIT_CUDA_CHECK(cudaEventElapsedTime(&t_ms, start, stop));
      if (i >= 2) ms.push_back(t_ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    std::vector<uint16_t> got(static_cast<size_t>(out.numel()));
    ATTNKIT_CUDA_CHECK(cudaMemcpyAsync(got.data(), out.data, out.nbytes(), cudaMemcpyDeviceToHost, stream()));
    ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream()));
    if (first_out.empty()) {
      first_out = std::move(got);
    } else if (!jit::outputs_agree(first_out, got, out.dtype == DType::bf16)) {
      std::fprintf(stderr, "attnkit jit: tile %s disagrees with %s on this call; passed over\n", k.describe().c_str(),
                   jit::tile_candidates(base, decode_shaped_, jit::ModuleCache::device_arch()).front().describe().c_str());
      return std::numeric_limits<double>::infinity();
    }
    return ms[ms.size() / 2];
  };
  const jit::TileConfig tile =
      jit::TileTuner::global().choose(base, bucket_, jit::ModuleCache::device_arch(), decode_shaped_, measure);
  jit::KernelKey k = base;
  k.tile = tile;
  return tuned_[name] = Tuned{&jit::ModuleCache::global().get(k), k};
}

void JitBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out) {
  const jit::KernelKey& base = key(layer, q.dtype);
  const ForwardBatch& b = batch();
  const TensorView loc(arena_.data(), DType::i64, Device::cuda, {b.num_tokens()});
  if (!base.tensor_cores()) {
    // Compiled (or found) before the cache store: a variant that does not compile writes nothing.
    const jit::CompiledKernel& kernel = jit::ModuleCache::global().get(base);
    store_new_kv(layer, k, v, loc);
    if (b.num_tokens() > 0) launch_warp_row(layer, kernel, q, out);
    return;
  }
  // This batch's choice for the layer: a slot lookup once made, no string built on a call.
  const size_t slot = layer_slot(layer, q.dtype);
  if (layer_tuned_.size() <= slot) {
    layer_tuned_.resize(static_cast<size_t>(model().num_layers()) * 2, nullptr);
    layer_work_.resize(layer_tuned_.size(), nullptr);
  }
  std::string name;  // the tuner's choice's name: built once a layer and batch, not on every call
  if (layer_tuned_[slot] == nullptr) {
    name = bucket_ + "|" + base.describe();
    if (!tuned_.count(name)) {
      jit::KernelKey first = base;
      first.tile = jit::tile_candidates(base, decode_shaped_, jit::ModuleCache::device_arch()).front();
      jit::ModuleCache::global().get(first);  // as above: a variant that does not compile fails here
    }
  }
  store_new_kv(layer, k, v, loc);
  if (b.num_tokens() == 0) return;
  if (layer_tuned_[slot] == nullptr) {
    const Tuned& t = tuned(name, layer, base, q, out);
    layer_tuned_[slot] = &t;
    layer_work_[slot] = &work(layer, t.key, *t.kernel);
  }
  launch_mma_tile(layer, *layer_tuned_[slot]->kernel, *layer_work_[slot], q, out);
}

void register_jit_backend(Registry& registry) {
  registry.add({.name = "jit",
                .description = "kernels compiled at run time (NVRTC) for the layer's exact shape and user variants, cached on disk",
                .device = Device::cuda,
                .capabilities = jit::capabilities,
                .why_unavailable = jit::why_unavailable,
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<JitBackend>(ctx);
                }});
}

}  // namespace attnkit
