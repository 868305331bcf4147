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

// Rows of [heads, dim] values, copied in by row index lists and out again.
struct Rows {
  std::vector<uint8_t> bytes;
  int64_t row_bytes = 0;
  TensorView like;  // dtype and [heads, dim] of the step's tensor

  void reset(const TensorView& t, int64_t num_rows) {
    like = t;
    row_bytes = t.empty() ? 0 : t.dim(1) * t.dim(2) * static_cast<int64_t>(dtype_size(t.dtype));
    bytes.resize(static_cast<size_t>(num_rows * row_bytes));
  }
  TensorView view(int64_t first, int64_t num_rows) {
    if (like.empty()) return TensorView();
    return TensorView(bytes.data() + first * row_bytes, like.dtype, Device::cpu, {num_rows, like.dim(1), like.dim(2)});
  }
  // this[dst_row0 + j] = src[rows[j]]
  void gather(const TensorView& src, const std::vector<int32_t>& rows, int64_t dst_row0) {
    if (src.empty()) return;
    const auto* s = static_cast<const uint8_t*>(src.data);
    for (size_t j = 0; j < rows.size(); ++j) {
      std::memcpy(bytes.data() + (dst_row0 + static_cast<int64_t>(j)) * row_bytes, s + rows[j] * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
  }
  // dst[rows[j]] = this[src_row0 + j]
  void scatter(const TensorView& dst, const std::vector<int32_t>& rows, int64_t src_row0) const {
    auto* d = static_cast<uint8_t*>(dst.data);
    for (size_t j = 0; j < rows.size(); ++j) {
      std::memcpy(d + rows[j] * row_bytes, bytes.data() + (src_row0 + static_cast<int64_t>(j)) * row_bytes,
                  static_cast<size_t>(row_bytes));
    }
  }
};

}  // namespace

struct ContextParallelAttention::Part {
  ForwardBatch batch;
  std::vector<int32_t> step_rows;  // [batch.num_tokens()] the step's row of each of the part's rows
  Rows q, k, v, out;
  std::vector<Rows> rank_out;      // prompts: each rank's zig-zag rows of the output
  bool empty() const { return batch.batch_size() == 0; }
};

std::string ContextParallelAttention::why_not(const std::string& backend) {
  const BackendInfo& info = Registry::global().get(backend);
  if (info.why_unavailable) {
    const std::string why = info.why_unavailable();
    if (!why.empty()) return why;
  }
  const Capabilities caps = info.capabilities();
  if (caps.device != Device::cpu) {
    return backend + " runs on a GPU: a group in one process runs CPU backends (one rank a GPU needs a process or "
                     "thread a GPU over NCCL)";
  }
  if (!caps.lse) return backend + " does not return the LSE that merging the ranks' partial outputs needs";
  return {};
}

ContextParallelAttention::ContextParallelAttention(const ModelSpec& model, const std::string& backend,
                                                   const std::vector<KvCache*>& caches, const ShareLayout& layout)
    : group_(layout.num_ranks) {
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
  for (Part* part : {decode_part_.get(), prefill_part_.get()}) {
    if (part->empty()) continue;
    const int64_t n = part->batch.num_tokens();
    part->q.reset(q, n);
    part->k.reset(k, n);
    part->v.reset(v, n);
    part->out.reset(out, n);
    part->q.gather(q, part->step_rows, 0);
    part->k.gather(k, part->step_rows, 0);
    part->v.gather(v, part->step_rows, 0);
    if (part == decode_part_.get()) {
      run_decode(layer, *part);
    } else {
      run_prefill(layer, *part);
    }
    part->out.scatter(out, part->step_rows, 0);
  }
}

void ContextParallelAttention::run_decode(int layer, Part& part) {
  const int64_t n = part.batch.num_tokens();
  for (auto& rank : decode_) rank->attend(layer, part.q.view(0, n), part.k.view(0, n), part.v.view(0, n));
  // Every rank merges the same gathered states into the same output; rank 0's is kept.
  part.rank_out.resize(1);
  part.rank_out[0].reset(part.out.like, n);
  for (size_t r = 0; r < decode_.size(); ++r) decode_[r]->merge((r == 0 ? part.out : part.rank_out[0]).view(0, n));
}

void ContextParallelAttention::run_prefill(int layer, Part& part) {
  // Each rank's zig-zag rows, gathered from the part's rows: q, k and v side by side in one Rows each.
  const size_t ranks = prefill_.size();
  std::vector<Rows> q(ranks), k(ranks), v(ranks);
  part.rank_out.resize(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    const std::vector<int32_t>& rows = prefill_[r]->rows();
    const auto m = static_cast<int64_t>(rows.size());
    const int64_t n = part.batch.num_tokens();
    q[r].reset(part.q.view(0, n), m);
    k[r].reset(part.k.view(0, n), m);
    v[r].reset(part.v.view(0, n), m);
    q[r].gather(part.q.view(0, n), rows, 0);
    k[r].gather(part.k.view(0, n), rows, 0);
    v[r].gather(part.v.view(0, n), rows, 0);
    part.rank_out[r].reset(part.out.view(0, n), m);
    prefill_[r]->exchange(layer, q[r].view(0, m), k[r].view(0, m), v[r].view(0, m));
  }
  for (size_t r = 0; r < ranks; ++r) {
    const auto m = static_cast<int64_t>(prefill_[r]->rows().size());
    prefill_[r]->attend(part.rank_out[r].view(0, m));
    part.rank_out[r].scatter(part.out.view(0, part.batch.num_tokens()), prefill_[r]->rows(), 0);
  }
}

}  // namespace attnkit::serving
