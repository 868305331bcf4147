// CudaNaiveBackend: uploads the batch's requests, page table, slots and masks at plan time, sizes
// the score workspace (refusing, with the byte count, what free memory cannot hold), then launches
// the three kernels of kernels/launch.h once for the whole batch.
#include "backends/cuda_naive/backend.h"

#include <algorithm>

#include "attnkit/registry.h"
#include "backends/cuda_naive/kernels/launch.h"
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit {

namespace {

// Kept free beyond the workspace, for the cache store, the allocator's slack and other streams'
// work: a baseline that takes the last byte of the device is a crash waiting for the next launch.
constexpr size_t kFreeMemoryMargin = size_t{512} << 20;
// The scores kernel puts chunks of 128 keys on grid.y (at most 65535 chunks).
constexpr int64_t kMaxKvLen = int64_t{65535} * 128;

}  // namespace

namespace cuda_naive {

Capabilities capabilities() {
  Capabilities c;
  c.device = Device::cuda;
  c.q_dtypes.assign(Support::q_dtypes.begin(), Support::q_dtypes.end());
  c.kv_dtypes.assign(Support::kv_dtypes.begin(), Support::kv_dtypes.end());
  c.max_head_dim = Support::max_head_dim;
  c.mla = false;
  c.cuda_graph = false;
  return c;
}

}  // namespace cuda_naive

CudaNaiveBackend::CudaNaiveBackend(const BackendContext& context) : AttentionBackend(context) {}

void CudaNaiveBackend::synchronize() { cuda::device_synchronize(); }

size_t CudaNaiveBackend::workspace_bytes() const {
  size_t total = scores_.nbytes() + requests_.nbytes() + page_indices_.nbytes() + out_cache_loc_.nbytes() +
                 custom_mask_.nbytes();
  for (const Buffer& b : sinks_) total += b.nbytes();
  return total;
}

size_t CudaNaiveBackend::score_bytes(const ForwardBatch& batch) const {
  int max_heads = 0;
  for (int l = 0; l < model().num_layers(); ++l) max_heads = std::max(max_heads, model().layer(l).num_qo_heads);
  size_t pairs = 0;
  for (int i = 0; i < batch.batch_size(); ++i) pairs += size_t(batch.qo_len(i)) * size_t(batch.kv_len(i));
  return size_t(max_heads) * pairs * sizeof(float);
}

void CudaNaiveBackend::upload(Buffer& buffer, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  if (buffer.nbytes() < nbytes) buffer = Buffer(Device::cuda, nbytes);
  buffer.copy_from_host(src, nbytes);
}

void CudaNaiveBackend::plan(const ForwardBatch& batch) {
  for (int i = 0; i < batch.batch_size(); ++i) {
    ATTNKIT_CHECK(batch.kv_len(i) <= kMaxKvLen, "cuda-naive: kv_len must be at most ", kMaxKvLen, ", got ",
                  batch.kv_len(i), " (request ", i, ")");
  }

  // The score matrix is the point of this backend and its limit: refuse before allocating.
  const size_t needed = score_bytes(batch);
  if (needed > scores_.nbytes()) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    ATTNKIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t usable = free_bytes + scores_.nbytes();  // the old workspace is given back first
    ATTNKIT_CHECK(needed + kFreeMemoryMargin <= usable, "cuda-naive: the score matrices need ", needed,
                  " bytes of device memory (num_qo_heads x qo_len x kv_len floats, summed over the batch), but only ",
                  usable, " bytes are free and ", kFreeMemoryMargin,
                  " are kept as a margin; use a tiled backend (planned, hopper) or split the batch");
    scores_ = Buffer();
    scores_ = Buffer(Device::cuda, needed);
  }

  std::vector<cuda_naive::RequestInfo> requests(static_cast<size_t>(batch.batch_size()));
  int64_t pairs = 0;
  max_kv_len_ = 0;
  for (int i = 0; i < batch.batch_size(); ++i) {
    const auto idx = static_cast<size_t>(i);
    cuda_naive::RequestInfo& r = requests[idx];
    r.pair_offset = pairs;
    r.mask_offset = batch.has_custom_mask(i) ? batch.custom_mask_indptr[idx] : -1;
    r.qo_start = batch.qo_indptr[idx];
    r.qo_len = batch.qo_len(i);
    r.kv_len = batch.kv_len(i);
    r.prefix_len = batch.prefix_lens[idx];
    r.page_start = batch.kv_page_indptr[idx];
    pairs += int64_t{r.qo_len} * r.kv_len;
    max_kv_len_ = std::max(max_kv_len_, r.kv_len);
  }
  upload(requests_, requests.data(), requests.size() * sizeof(cuda_naive::RequestInfo));
  upload(page_indices_, batch.kv_page_indices.data(), batch.kv_page_indices.size() * sizeof(int32_t));
  upload(out_cache_loc_, batch.out_cache_loc.data(), batch.out_cache_loc.size() * sizeof(int64_t));
  upload(custom_mask_, batch.custom_mask.data(), batch.custom_mask.size());
  if (sinks_.empty()) {
    sinks_.resize(static_cast<size_t>(model().num_layers()));
    for (int l = 0; l < model().num_layers(); ++l) {
      const std::vector<float>& sinks = model().layer(l).sinks;
      upload(sinks_[static_cast<size_t>(l)], sinks.data(), sinks.size() * sizeof(float));
    }
  }
}

void CudaNaiveBackend::run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out) {
  const ForwardBatch& b = batch();
  const int64_t num_tokens = b.num_tokens();
  store_new_kv(layer, k, v, TensorView(out_cache_loc_.data(), DType::i64, Device::cuda, {num_tokens}));

  const Buffer& sinks = sinks_[static_cast<size_t>(layer)];
  cuda_naive::BatchParams p;
  static_cast<LayerParams&>(p) = layer_params(layer);
  p.q = q.data;
  p.k_pool = cache().k_pool(layer);
  p.v_pool = cache().v_pool(layer);
  p.requests = static_cast<const cuda_naive::RequestInfo*>(requests_.data());
  p.page_indices = static_cast<const int32_t*>(page_indices_.data());
  p.custom_mask = b.custom_mask.empty() ? nullptr : static_cast<const uint8_t*>(custom_mask_.data());
  p.sinks = sinks.nbytes() ? static_cast<const float*>(sinks.data()) : nullptr;
  p.scores = static_cast<float*>(scores_.data());
  p.out = out.data;
  p.q_dtype = q.dtype;
  p.batch_size = b.batch_size();
  p.num_rows = num_tokens * p.num_qo_heads;
  p.max_kv_len = max_kv_len_;
  cuda_naive::launch_scores(p);
  cuda_naive::launch_softmax(p);
  cuda_naive::launch_pv(p);
}

void register_cuda_naive_backend(Registry& registry) {
  registry.add({.name = "cuda-naive",
                .description = "scores to HBM, softmax, then P V: three kernels over the batch, no tiling (the IO-unaware baseline)",
                .device = Device::cuda,
                .capabilities = cuda_naive::capabilities,
                .why_unavailable = [] { return cuda::why_unavailable(); },
                .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                  return std::make_unique<CudaNaiveBackend>(ctx);
                }});
}

}  // namespace attnkit
