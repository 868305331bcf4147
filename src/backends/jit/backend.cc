#include "backends/jit/backend.h"

#include <cuda_runtime.h>

#include <cstring>

#include "attnkit/registry.h"
#include "backends/jit/config.h"
#include "backends/jit/module_cache.h"
#include "backends/jit/nvrtc.h"
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
constexpr int kWarps = 4;  // the template's WARPS

}  // namespace

JitBackend::JitBackend(const BackendContext& context) : AttentionBackend(context) {
  const std::string why = jit::why_unavailable();
  ATTNKIT_CHECK(why.empty(), "jit: ", why);
  for (int l = 0; l < model().num_layers(); ++l) {
    const AttentionSpec& s = model().layer(l);
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

const jit::CompiledKernel& JitBackend::kernel(int layer, DType q_dtype) {
  const size_t slot = static_cast<size_t>(layer) * 2 + (q_dtype == DType::bf16 ? 0 : 1);
  if (kernels_.size() <= slot) kernels_.resize(static_cast<size_t>(model().num_layers()) * 2, nullptr);
  if (kernels_[slot] == nullptr) {
    kernels_[slot] = &jit::ModuleCache::global().get(jit::kernel_key_for(model().layer(layer), cache().config(), q_dtype));
  }
  return *kernels_[slot];
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
  for (size_t i = 0; i < requests; ++i) {
    const int r = static_cast<int>(i);
    for (int32_t t = batch.qo_indptr[i]; t < batch.qo_indptr[i + 1]; ++t) token_request[t] = r;
    info[4 * i + 0] = batch.qo_indptr[i];
    info[4 * i + 1] = batch.prefix_lens[i];
    info[4 * i + 2] = batch.kv_len(r);
    info[4 * i + 3] = batch.kv_page_indptr[i];
  }
  std::memcpy(host.data() + off_pages_, batch.kv_page_indices.data(), batch.kv_page_indices.size() * sizeof(int32_t));
  if (arena_.nbytes() < total) arena_ = Buffer(Device::cuda, total + total / 2);
  arena_.copy_from_host(host.data(), total);
}

void JitBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out) {
  const LayerParams lp = layer_params(layer);
  // Compiled (or found) before the cache store: a variant that does not compile writes nothing.
  const jit::CompiledKernel& kernel = this->kernel(layer, q.dtype);
  const ForwardBatch& b = batch();
  auto* base = static_cast<unsigned char*>(arena_.data());
  store_new_kv(layer, k, v, TensorView(base, DType::i64, Device::cuda, {b.num_tokens()}));
  if (b.num_tokens() == 0) return;
  const void* q_ptr = q.data;
  void* out_ptr = out.data;
  const void* k_pool = cache().k_pool(layer);
  const void* v_pool = cache().v_pool(layer);
  const void* token_request = base + off_token_request_;
  const void* requests = base + off_requests_;
  const void* pages = base + off_pages_;
  const Buffer& sinks = sinks_[static_cast<size_t>(layer)];
  const void* sinks_ptr = sinks.nbytes() ? sinks.data() : nullptr;
  float sm_scale = lp.sm_scale, soft_cap = lp.logits_soft_cap;
  int window_left = lp.window_left, causal = lp.causal ? 1 : 0;
  void* args[] = {&q_ptr, &out_ptr, &k_pool, &v_pool, &token_request, &requests, &pages, &sinks_ptr,
                  &sm_scale, &soft_cap, &window_left, &causal};
  const dim3 grid(static_cast<unsigned>(b.num_tokens()), static_cast<unsigned>(lp.num_kv_heads));
  ATTNKIT_CUDA_CHECK(cudaLaunchKernel(kernel.entry, grid, dim3(kWarps * 32), args, 0, stream()));
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
