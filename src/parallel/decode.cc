// ContextParallelDecode: one rank's decode step over its share, gathered and merged with every
// other rank's (attnkit/context_parallel.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attnkit/context_parallel.h"
#include "attnkit/error.h"
#include "attnkit/merge.h"
#include "parallel/checks.h"

namespace attnkit {
namespace {

constexpr const char* kWho = "context parallel decode";

// Row `row` of a [rows, ...] view: the same view one row long.
TensorView row_of(const TensorView& t, int64_t row) {
  const int64_t row_elems = t.numel() / t.dim(0);
  TensorView r = t;
  r.data = static_cast<uint8_t*>(t.data) + static_cast<size_t>(row * row_elems) * dtype_size(t.dtype);
  r.shape[0] = 1;
  return r;
}

// The rows `rows` of `src` into `dst` [rows.size(), ...], on any devices.
template <typename Index>
void gather_rows(const TensorView& dst, const TensorView& src, const std::vector<Index>& rows) {
  for (size_t i = 0; i < rows.size(); ++i) copy(row_of(dst, static_cast<int64_t>(i)), row_of(src, rows[i]));
}

}  // namespace

ContextParallelDecode::ContextParallelDecode(Communicator& comm, AttentionBackend& backend, const ShareLayout& layout)
    : comm_(comm), backend_(backend), layout_(layout) {
  layout_.validate();
  ATTNKIT_CHECK(comm_.size() == layout_.num_ranks, "context parallel decode: the communicator has ", comm_.size(),
                " ranks, expected the layout's num_ranks (", layout_.num_ranks, ")");
  ATTNKIT_CHECK(backend_.caps().lse, "context parallel decode: backend ", backend_.name(),
                " does not return the LSE, which the merge needs (capabilities().lse is false)");
  const int pages = backend_.cache().config().num_pages;
  ATTNKIT_CHECK(pages == layout_.rank_num_pages, "context parallel decode: rank ", comm_.rank(), "'s cache has ", pages,
                " pages, expected the layout's rank_num_pages (", layout_.rank_num_pages, ")");
  for (int l = 0; l < backend_.model().num_layers(); ++l) {
    const AttentionSpec& spec = backend_.model().layer(l);
    const char* why = parallel::why_not_shareable(spec);
    ATTNKIT_CHECK(why == nullptr, "context parallel decode: layer ", l, " has ", why,
                  ", which a share of the history cannot apply");
  }
}

void ContextParallelDecode::plan(const ForwardBatch& global) {
  global_ = nullptr;  // a failed plan leaves nothing to attend with
  share_ = local_share(global, layout_, comm_.rank());
  // The backend keeps a pointer to the batch it plans: share_'s, which lives until the next plan.
  if (share_.batch.batch_size() > 0) backend_.init_forward_metadata(share_.batch);
  global_ = &global;
  layer_ = -1;
}

void ContextParallelDecode::attend(int layer, const TensorView& q, const TensorView& k, const TensorView& v) {
  ATTNKIT_CHECK(global_ != nullptr, "context parallel decode: plan must be called before attend");
  const AttentionSpec& spec = backend_.model().layer(layer);  // throws for a layer out of range
  const int64_t n = global_->batch_size();
  const Device device = backend_.caps().device;
  parallel::check_rows(kWho, "q", q, n, spec.num_qo_heads, spec.head_dim_qk, q.dtype, device);
  parallel::check_rows(kWho, "k", k, n, spec.num_kv_heads, spec.head_dim_qk, q.dtype, device);
  if (spec.is_mla()) {
    ATTNKIT_CHECK(v.empty(), "context parallel decode: MLA stores the latent as k; v must be empty, got ",
                  v.describe());
  } else {
    parallel::check_rows(kWho, "v", v, n, spec.num_kv_heads, spec.head_dim_vo, q.dtype, device);
  }
  const int64_t heads = spec.num_qo_heads, dv = spec.head_dim_vo;
  const int64_t local = share_.batch.batch_size();
  const auto num_stored = static_cast<int64_t>(share_.store.token_idx.size());

  // The new K/V whose positions are this rank's, into its cache; the backend then stores nothing.
  KvCache& cache = backend_.cache();
  if (num_stored > 0) {
    Buffer k_rows(device, static_cast<size_t>(num_stored * (k.numel() / n)) * dtype_size(k.dtype));
    const TensorView k_view = k_rows.view(k.dtype, {num_stored, k.dim(1), k.dim(2)});
    gather_rows(k_view, k, share_.store.token_idx);
    Buffer v_rows;
    TensorView v_view;
    if (!spec.is_mla()) {
      v_rows = Buffer(device, static_cast<size_t>(num_stored * (v.numel() / n)) * dtype_size(v.dtype));
      v_view = v_rows.view(v.dtype, {num_stored, v.dim(1), v.dim(2)});
      gather_rows(v_view, v, share_.store.token_idx);
    }
    Buffer slots(device, share_.store.slots.size() * sizeof(int64_t));
    slots.copy_from_host(share_.store.slots.data(), slots.nbytes());
    cache.store(layer, k_view, v_view, slots.view(DType::i64, {num_stored}));
  }

  // This rank's state of every global row: empty (lse -inf, o 0) where it holds none of the request.
  state_floats_ = n * heads * (dv + 1);
  send_host_.assign(static_cast<size_t>(state_floats_), 0.0f);
  std::fill(send_host_.begin(), send_host_.begin() + n * heads, -std::numeric_limits<float>::infinity());
  if (local > 0) {
    const DType part_dtype = parallel::partial_dtype(backend_.caps(), q.dtype);
    const int64_t q_row = heads * spec.head_dim_qk;
    std::vector<uint8_t> q_all(q.nbytes()), q_part(static_cast<size_t>(local * q_row) * dtype_size(part_dtype));
    copy(TensorView(q_all.data(), q.dtype, Device::cpu, {n, heads, spec.head_dim_qk}), q);
    for (int64_t i = 0; i < local; ++i) {
      const int64_t row = share_.request_idx[static_cast<size_t>(i)];
      for (int64_t e = 0; e < q_row; ++e) {
        store_from_float(q_part.data(), part_dtype, i * q_row + e,
                         load_as_float(q_all.data(), q.dtype, row * q_row + e));
      }
    }
    Buffer q_dev(device, q_part.size());
    q_dev.copy_from_host(q_part.data(), q_part.size());
    Buffer o_dev(device, static_cast<size_t>(local * heads * dv) * dtype_size(part_dtype));
    Buffer lse_dev(device, static_cast<size_t>(local * heads) * sizeof(float));
    backend_.forward(layer, q_dev.view(part_dtype, {local, heads, spec.head_dim_qk}), TensorView(), TensorView(),
                     o_dev.view(part_dtype, {local, heads, dv}), lse_dev.view(DType::f32, {local, heads}));
    backend_.synchronize();
    std::vector<uint8_t> o_host(o_dev.nbytes());
    std::vector<float> lse_host(static_cast<size_t>(local * heads));
    o_dev.copy_to_host(o_host.data(), o_host.size());
    lse_dev.copy_to_host(lse_host.data(), lse_host.size() * sizeof(float));
    float* lse = send_host_.data();
    float* o = send_host_.data() + n * heads;
    for (int64_t i = 0; i < local; ++i) {
      const int64_t row = share_.request_idx[static_cast<size_t>(i)];
      for (int64_t h = 0; h < heads; ++h) lse[row * heads + h] = lse_host[static_cast<size_t>(i * heads + h)];
      for (int64_t e = 0; e < heads * dv; ++e) {
        o[row * heads * dv + e] = load_as_float(o_host.data(), part_dtype, i * heads * dv + e);
      }
    }
  }
  recv_host_.assign(static_cast<size_t>(state_floats_ * comm_.size()), 0.0f);
  if (comm_.device() == Device::cpu) {
    comm_.all_gather(send_host_.data(), recv_host_.data(), state_floats_);
  } else {
    const size_t bytes = send_host_.size() * sizeof(float);
    if (send_.nbytes() != bytes) {
      send_ = Buffer(comm_.device(), bytes);
      recv_ = Buffer(comm_.device(), bytes * static_cast<size_t>(comm_.size()));
    }
    send_.copy_from_host(send_host_.data(), bytes);
    comm_.all_gather(static_cast<const float*>(send_.data()), static_cast<float*>(recv_.data()), state_floats_);
  }
  layer_ = layer;
  q_dtype_ = q.dtype;
}

void ContextParallelDecode::merge(const TensorView& out) {
  ATTNKIT_CHECK(layer_ >= 0, "context parallel decode: attend must be called before merge");
  const AttentionSpec& spec = backend_.model().layer(layer_);
  const int64_t n = global_->batch_size(), heads = spec.num_qo_heads, dv = spec.head_dim_vo;
  parallel::check_rows(kWho, "out", out, n, spec.num_qo_heads, spec.head_dim_vo, q_dtype_, backend_.caps().device);
  if (comm_.device() != Device::cpu) {
    synchronize(comm_.device());
    recv_.copy_to_host(recv_host_.data(), recv_host_.size() * sizeof(float));
  }
  std::vector<AttentionState> parts;
  for (int r = 0; r < comm_.size(); ++r) {
    float* state = recv_host_.data() + r * state_floats_;
    parts.push_back({TensorView(state + n * heads, DType::f32, Device::cpu, {n, heads, dv}),
                     TensorView(state, DType::f32, Device::cpu, {n, heads})});
  }
  // The merge is in f32 on the host; the output is rounded to q's dtype once, at the end.
  std::vector<float> o(static_cast<size_t>(n * heads * dv)), lse(static_cast<size_t>(n * heads));
  merge_states(parts, {TensorView(o.data(), DType::f32, Device::cpu, {n, heads, dv}),
                       TensorView(lse.data(), DType::f32, Device::cpu, {n, heads})});
  std::vector<uint8_t> out_host(out.nbytes());
  for (size_t e = 0; e < o.size(); ++e) store_from_float(out_host.data(), out.dtype, static_cast<int64_t>(e), o[e]);
  copy(out, TensorView(out_host.data(), out.dtype, Device::cpu, {n, heads, dv}));
}

}  // namespace attnkit
