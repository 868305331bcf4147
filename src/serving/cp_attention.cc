// ContextParallelAttention: a step's requests cut into its decodes and its prompts, each part's
// rows gathered from the step's q/k/v, run over the ranks, and its output rows put back.
#include "serving/cp_attention.h"

#include <cstring>

#include "attnkit/error.h"
#include "attnkit/registry.h"

namespace attnkit::serving {

namespace {

// Request `requests` of `global`, in that order, as a batch of their own (page ids unchanged).
ForwardBatch sub_batch(const ForwardBatch& global, const std::vector<int>& requests) {
  ForwardBatch b;
  b.page_size = global.page_size;
  b.qo_indptr = {0};
  b.kv_page_indptr = {0};
  for (const int i : requests) {
    b.qo_indptr.push_back(b.qo_indptr.back() + global.qo_len(i));
    b.kv_page_indptr.push_back(b.kv_page_indptr.back() + global.num_pages(i));
    b.kv_page_indices.insert(b.kv_page_indices.end(), global.kv_page_indices.begin() + global.kv_page_indptr[i],
                             global.kv_page_indices.begin() + global.kv_page_indptr[i + 1]);
    b.kv_last_page_len.push_back(global.kv_last_page_len[static_cast<size_t>(i)]);
    b.prefix_lens.push_back(global.prefix_lens[static_cast<size_t>(i)]);
    b.out_cache_loc.insert(b.out_cache_loc.end(), global.out_cache_loc.begin() + global.qo_indptr[i],
                           global.out_cache_loc.begin() + global.qo_indptr[i + 1]);
    if (!global.request_ids.empty()) b.request_ids.push_back(global.request_ids[static_cast<size_t>(i)]);
  }
  b.mode = forward_mode_of(b.qo_indptr);
  return b;
}

// Rows of [heads, dim] values on the host, mirrored on the ranks' device where that is a GPU: filled
// from index lists of host rows, handed to the ranks as device views, and read back.
struct Rows {
  Device device = Device::cpu;
  DType dtype = DType::f32;
  int64_t heads = 0, dim = 0, num_rows = 0, row_bytes = 0;
  std::vector<uint8_t> host;
  Buffer dev;

  // Shaped as `like` ([*, heads, dim], any device), num_rows rows; `like` empty: no rows (MLA's v).
  void reset(const TensorView& like, int64_t rows, Device on) {
    device = on;
    num_rows = like.empty() ? 0 : rows;
    row_bytes = 0;
    if (like.empty()) return;
    dtype = like.dtype;
    heads = like.dim(1);
    dim = like.dim(2);
    row_bytes = heads * dim * static_cast<int64_t>(dtype_size(dtype));
    host.resize(static_cast<size_t>(num_rows * row_bytes));
    if (device != Device::cpu && dev.nbytes() < host.size()) dev = Buffer(device, host.size());
  }
  // The rows where the ranks read and write them.
  TensorView view() {
    if (row_bytes == 0) return TensorView();
    void* data = device == Device::cpu ? static_cast<void*>(host.data()) : dev.data();
    return TensorView(data, dtype, device, {num_rows, heads, dim});
  }
  // this[j] = src[rows[j]] (src: host bytes of rows like these), then onto the device.
  void gather(const uint8_t* src, const std::vector<int32_t>& rows) {
    if (row_bytes == 0) return;
    for (size_t j = 0; j < rows.size(); ++j) {
      std::memcpy(host.data() + static_cast<int64_t>(j) * row_bytes, src + rows[j] * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
    if (device != Device::cpu && !host.empty()) dev.copy_from_host(host.data(), host.size());
  }
  // What the ranks wrote on the device, back to the host.
  void pull() {
    if (device != Device::cpu && !host.empty()) dev.copy_to_host(host.data(), host.size());
  }
  // dst[rows[j]] = this[j] on the host (dst: host bytes of rows like these).
  void scatter(uint8_t* dst, const std::vector<int32_t>& rows) const {
    for (size_t j = 0; j < rows.size(); ++j) {
      std::memcpy(dst + rows[j] * row_bytes, host.data() + static_cast<int64_t>(j) * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
  }
};

// A step tensor's bytes on the host: the tensor itself on the CPU, else a copy.
const uint8_t* host_bytes(const TensorView& t, std::vector<uint8_t>& copy_of) {
  if (t.empty() || t.device == Device::cpu) return static_cast<const uint8_t*>(t.data);
  copy_of.resize(t.nbytes());
  copy(TensorView(copy_of.data(), DType::u8, Device::cpu, {static_cast<int64_t>(t.nbytes())}),
       TensorView(t.data, DType::u8, t.device, {static_cast<int64_t>(t.nbytes())}));
  return copy_of.data();
}

}  // namespace

struct ContextParallelAttention::Part {
  ForwardBatch batch;
  std::vector<int32_t> step_rows;  // [batch.num_tokens()] the step's row of each of the part's rows
  Rows q, k, v, out;
  // Prompts: each rank's zig-zag rows of q, k, v and the output (decode: rank_out[0], the other
  // ranks' copy of the merged output). Kept from layer to layer, so their buffers are reused.
  std::vector<Rows> rank_q, rank_k, rank_v, rank_out;
  bool empty() const { return batch.batch_size() == 0; }
};

std::string ContextParallelAttention::why_not(const std::string& backend) {
  const BackendInfo& info = Registry::global().get(backend);
  if (info.why_unavailable) {
    const std::string why = info.why_unavailable();
    if (!why.empty()) return why;
  }
  if (!info.capabilities().lse) return backend + " does not return the LSE that merging the ranks' partial outputs needs";
  return {};
}

ContextParallelAttention::ContextParallelAttention(const ModelSpec& model, const std::string& backend,
                                                   const std::vector<KvCache*>& caches, const ShareLayout& layout)
    : device_(Registry::global().get(backend).device), group_(layout.num_ranks, device_) {
  const std::string why = why_not(backend);
  ATTNKIT_CHECK(why.empty(), "replay --cp: ", why);
  ATTNKIT_CHECK(static_cast<int>(caches.size()) == layout.num_ranks, "replay --cp: ", layout.num_ranks,
                " ranks need as many caches, got ", caches.size());
  for (int r = 0; r < layout.num_ranks; ++r) {
    KvCache& cache = *caches[static_cast<size_t>(r)];
    backends_.push_back(create_backend(backend, {&model, &cache}));
    decode_.push_back(std::make_unique<ContextParallelDecode>(group_.rank(r), *backends_.back(), layout));
    prefill_.push_back(std::make_unique<ContextParallelPrefill>(group_.rank(r), backend, model, cache, layout));
  }
  decode_part_ = std::make_unique<Part>();
  prefill_part_ = std::make_unique<Part>();
}

ContextParallelAttention::~ContextParallelAttention() = default;

void ContextParallelAttention::synchronize() { attnkit::synchronize(device_); }

void ContextParallelAttention::plan(const ForwardBatch& batch) {
  std::vector<int> decodes, prompts;
  for (int i = 0; i < batch.batch_size(); ++i) {
    ATTNKIT_CHECK(batch.qo_len(i) == 1 || batch.prefix_lens[static_cast<size_t>(i)] == 0, "replay --cp: request ", i,
                  " of the step extends a history of ", batch.prefix_lens[static_cast<size_t>(i)],
                  " tokens by ", batch.qo_len(i), ": prompts must run whole (no chunked prefill)");
    (batch.qo_len(i) == 1 ? decodes : prompts).push_back(i);
  }
  for (auto [part, requests] : {std::pair{decode_part_.get(), &decodes}, std::pair{prefill_part_.get(), &prompts}}) {
    part->batch = sub_batch(batch, *requests);
    part->step_rows.clear();
    for (const int i : *requests) {
      for (int32_t t = batch.qo_indptr[i]; t < batch.qo_indptr[i + 1]; ++t) part->step_rows.push_back(t);
    }
  }
  if (!decode_part_->empty()) {
    for (auto& rank : decode_) rank->plan(decode_part_->batch);
  }
  if (!prefill_part_->empty()) {
    for (auto& rank : prefill_) rank->plan(prefill_part_->batch);
  }
}

void ContextParallelAttention::forward(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                                       const TensorView& out) {
  // The step's rows on the host (copies where they are on a GPU); the output is put together there.
  const uint8_t* q_host = host_bytes(q, q_host_);
  const uint8_t* k_host = host_bytes(k, k_host_);
  const uint8_t* v_host = host_bytes(v, v_host_);
  out_host_.resize(out.device == Device::cpu ? 0 : out.nbytes());
  uint8_t* out_bytes = out.device == Device::cpu ? static_cast<uint8_t*>(out.data) : out_host_.data();
  for (Part* part : {decode_part_.get(), prefill_part_.get()}) {
    if (part->empty()) continue;
    const int64_t n = part->batch.num_tokens();
    part->q.reset(q, n, device_);
    part->k.reset(k, n, device_);
    part->v.reset(v, n, device_);
    part->out.reset(out, n, device_);
    part->q.gather(q_host, part->step_rows);
    part->k.gather(k_host, part->step_rows);
    part->v.gather(v_host, part->step_rows);
    if (part == decode_part_.get()) {
      run_decode(layer, *part);
    } else {
      run_prefill(layer, *part);
    }
    part->out.scatter(out_bytes, part->step_rows);  // every row of the step is in one part
  }
  if (out.device != Device::cpu) {
    copy(TensorView(out.data, DType::u8, out.device, {static_cast<int64_t>(out.nbytes())}),
         TensorView(out_host_.data(), DType::u8, Device::cpu, {static_cast<int64_t>(out.nbytes())}));
  }
}

void ContextParallelAttention::run_decode(int layer, Part& part) {
  for (auto& rank : decode_) rank->attend(layer, part.q.view(), part.k.view(), part.v.view());
  // Every rank merges the same gathered states into the same output; rank 0's is kept.
  part.rank_out.resize(1);
  part.rank_out[0].reset(part.out.view(), part.out.num_rows, device_);
  for (size_t r = 0; r < decode_.size(); ++r) decode_[r]->merge((r == 0 ? part.out : part.rank_out[0]).view());
  part.out.pull();
}

void ContextParallelAttention::run_prefill(int layer, Part& part) {
  // Each rank's zig-zag rows of the part's q, k and v, and of its output.
  const size_t ranks = prefill_.size();
  for (std::vector<Rows>* each : {&part.rank_q, &part.rank_k, &part.rank_v, &part.rank_out}) each->resize(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    const std::vector<int32_t>& rows = prefill_[r]->rows();
    const auto m = static_cast<int64_t>(rows.size());
    Rows &q = part.rank_q[r], &k = part.rank_k[r], &v = part.rank_v[r];
    for (auto [mine, whole] : {std::pair{&q, &part.q}, std::pair{&k, &part.k}, std::pair{&v, &part.v}}) {
      mine->reset(whole->view(), m, device_);
      mine->gather(whole->host.data(), rows);
    }
    part.rank_out[r].reset(part.out.view(), m, device_);
    prefill_[r]->exchange(layer, q.view(), k.view(), v.view());
  }
  for (size_t r = 0; r < ranks; ++r) {
    prefill_[r]->attend(part.rank_out[r].view());
    part.rank_out[r].pull();
    part.rank_out[r].scatter(part.out.host.data(), prefill_[r]->rows());
  }
}

}  // namespace attnkit::serving
