// ContextParallelDecode: one rank's decode step over its share, gathered and merged with every
// other rank's (attnkit/context_parallel.h): on a GPU backend all on the device (the kernels are
// decode_kernels.h's), on a CPU backend through the host.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "attnkit/context_parallel.h"
#include "attnkit/error.h"
#include "attnkit/merge.h"
#include "parallel/checks.h"
#include "parallel/decode_kernels.h"
#include "parallel/index_upload.h"

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

// Where one layer's step keeps its rows and states in the device workspace, in bytes from its
// start, each region 256-byte aligned: the local q rows [local, heads, dk] and o [local, heads, dv]
// in the partial dtype, lse [local, heads] f32, the stored K and V rows [stored, kv_heads, d] in
// k's dtype (MLA: K only), the send state and every rank's gathered one (f32).
struct StepLayout {
  size_t q = 0, o = 0, lse = 0, k = 0, v = 0, send = 0, recv = 0, bytes = 0;
};

StepLayout step_layout(const AttentionSpec& spec, int64_t n, int64_t local, int64_t stored, int ranks,
                       size_t part_bytes, size_t kv_bytes) {
  const auto heads = static_cast<size_t>(spec.num_qo_heads), kv_heads = static_cast<size_t>(spec.num_kv_heads);
  const auto dk = static_cast<size_t>(spec.head_dim_qk), dv = static_cast<size_t>(spec.head_dim_vo);
  const auto rows = static_cast<size_t>(n), local_rows = static_cast<size_t>(local);
  const auto stored_rows = static_cast<size_t>(stored);
  StepLayout l;
  auto region = [&](size_t nbytes) {
    const size_t begin = l.bytes;
    l.bytes = (l.bytes + nbytes + 255) / 256 * 256;
    return begin;
  };
  l.q = region(local_rows * heads * dk * part_bytes);
  l.o = region(local_rows * heads * dv * part_bytes);
  l.lse = region(local_rows * heads * sizeof(float));
  l.k = region(stored_rows * kv_heads * dk * kv_bytes);
  l.v = region(spec.is_mla() ? 0 : stored_rows * kv_heads * dv * kv_bytes);
  const size_t state_bytes = rows * heads * (dv + 1) * sizeof(float);
  l.send = region(state_bytes);
  l.recv = region(state_bytes * static_cast<size_t>(ranks));
  return l;
}

}  // namespace

// A GPU backend's plan: the share's index arrays on the device (uploaded once a batch), and one
// workspace for every layer's step (StepLayout), reallocated only when a batch needs more.
struct ContextParallelDecode::DeviceStep {
  Buffer index;      // slots [stored] i64, then request_idx [local], token_idx [stored], local_of_row [n] i32
  Buffer workspace;  // the largest StepLayout of the batch's layers
  int64_t* slots = nullptr;
  int32_t* request_idx = nullptr;   // the global row of each local one
  int32_t* token_idx = nullptr;     // the global row of each token this rank stores
  int32_t* local_of_row = nullptr;  // the local row of each global one, -1 where this rank holds none
  size_t recv_at = 0;               // where the last attend() gathers the states, in the workspace
};

ContextParallelDecode::~ContextParallelDecode() = default;

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
  const Device device = backend_.caps().device;
  if (device != Device::cpu) {
    // The step's states stay in device memory: a communicator that gathers on the host would need
    // them copied out and back, with a wait, every layer.
    ATTNKIT_CHECK(comm_.device() == device, "context parallel decode: backend ", backend_.name(), " runs on ",
                  device_name(device), ", so the communicator must gather on ", device_name(device), " too, got one on ",
                  device_name(comm_.device()), " (InProcessGroup(size, Device::", device_name(device), "), or NCCL)");
    device_ = std::make_unique<DeviceStep>();
  }
}

void ContextParallelDecode::plan(const ForwardBatch& global) {
  global_ = nullptr;  // a failed plan leaves nothing to attend with
  share_ = local_share(global, layout_, comm_.rank());
  // The backend keeps a pointer to the batch it plans: share_'s, which lives until the next plan.
  if (share_.batch.batch_size() > 0) backend_.init_forward_metadata(share_.batch);
  if (device_) plan_device(global);
  global_ = &global;
  layer_ = -1;
}

void ContextParallelDecode::plan_device(const ForwardBatch& global) {
  DeviceStep& d = *device_;
  const int64_t n = global.batch_size(), local = share_.batch.batch_size();
  const auto stored = static_cast<int64_t>(share_.store.token_idx.size());
  std::vector<int32_t> local_of_row(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < local; ++i) local_of_row[static_cast<size_t>(share_.request_idx[static_cast<size_t>(i)])] =
      static_cast<int32_t>(i);
  parallel::IndexUpload up;  // the i64 slots first, then the i32 arrays
  const size_t slots = up.add(share_.store.slots), request_idx = up.add(share_.request_idx);
  const size_t token_idx = up.add(share_.store.token_idx), local_rows = up.add(local_of_row);
  uint8_t* base = up.upload(d.index, backend_.caps().device);
  d.slots = reinterpret_cast<int64_t*>(base + slots);
  d.request_idx = reinterpret_cast<int32_t*>(base + request_idx);
  d.token_idx = reinterpret_cast<int32_t*>(base + token_idx);
  d.local_of_row = reinterpret_cast<int32_t*>(base + local_rows);
  // Sized for f32 rows, the widest the step takes, on the layer that needs the most.
  size_t bytes = 0;
  for (int l = 0; l < backend_.model().num_layers(); ++l) {
    bytes = std::max(bytes, step_layout(backend_.model().layer(l), n, local, stored, comm_.size(), sizeof(float),
                                        sizeof(float)).bytes);
  }
  if (d.workspace.nbytes() < bytes) d.workspace = Buffer(backend_.caps().device, bytes);
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
  state_floats_ = n * spec.num_qo_heads * (spec.head_dim_vo + 1);
  if (device_) {
    attend_device(layer, q, k, v);
  } else {
    attend_host(layer, q, k, v);
  }
  layer_ = layer;
  q_dtype_ = q.dtype;
}

void ContextParallelDecode::attend_device(int layer, const TensorView& q, const TensorView& k, const TensorView& v) {
  DeviceStep& d = *device_;
  const AttentionSpec& spec = backend_.model().layer(layer);
  const int64_t n = global_->batch_size(), heads = spec.num_qo_heads, dk = spec.head_dim_qk, dv = spec.head_dim_vo;
  const int64_t local = share_.batch.batch_size();
  const auto stored = static_cast<int64_t>(share_.store.token_idx.size());
  const Device device = backend_.caps().device;
  const DType part_dtype = parallel::partial_dtype(backend_.caps(), q.dtype);
  const StepLayout l =
      step_layout(spec, n, local, stored, comm_.size(), dtype_size(part_dtype), dtype_size(k.dtype));
  auto* w = static_cast<uint8_t*>(d.workspace.data());

  if (stored > 0) {  // the new K/V whose positions are this rank's, into its cache
    const parallel::RowGather k_side{w + l.k, k.dtype, k.data, k.dtype, k.numel() / n};
    const parallel::RowGather v_side =
        spec.is_mla() ? parallel::RowGather{} : parallel::RowGather{w + l.v, v.dtype, v.data, v.dtype, v.numel() / n};
    parallel::gather_rows_cuda(d.token_idx, stored, k_side, v_side);
    const TensorView k_rows(w + l.k, k.dtype, device, {stored, k.dim(1), k.dim(2)});
    const TensorView v_rows =
        spec.is_mla() ? TensorView() : TensorView(w + l.v, v.dtype, device, {stored, v.dim(1), v.dim(2)});
    backend_.cache().store(layer, k_rows, v_rows, TensorView(d.slots, DType::i64, device, {stored}));
  }
  if (local > 0) {  // the backend then stores nothing (k and v empty)
    parallel::gather_rows_cuda(d.request_idx, local, {w + l.q, part_dtype, q.data, q.dtype, heads * dk});
    backend_.forward(layer, TensorView(w + l.q, part_dtype, device, {local, heads, dk}), TensorView(), TensorView(),
                     TensorView(w + l.o, part_dtype, device, {local, heads, dv}),
                     TensorView(w + l.lse, DType::f32, device, {local, heads}));
  }
  auto* send = reinterpret_cast<float*>(w + l.send);
  parallel::write_send_state_cuda(send, w + l.o, part_dtype, reinterpret_cast<const float*>(w + l.lse),
                                  d.local_of_row, n, static_cast<int>(heads), static_cast<int>(dv));
  // No stream: the calling thread's default one, where the backends and the kernels above queue.
  comm_.all_gather(send, reinterpret_cast<float*>(w + l.recv), state_floats_);
  d.recv_at = l.recv;
}

void ContextParallelDecode::attend_host(int layer, const TensorView& q, const TensorView& k, const TensorView& v) {
  const AttentionSpec& spec = backend_.model().layer(layer);
  const int64_t n = global_->batch_size();
  const Device device = backend_.caps().device;
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
}

void ContextParallelDecode::merge(const TensorView& out) {
  ATTNKIT_CHECK(layer_ >= 0, "context parallel decode: attend must be called before merge");
  const AttentionSpec& spec = backend_.model().layer(layer_);
  const int64_t n = global_->batch_size();
  parallel::check_rows(kWho, "out", out, n, spec.num_qo_heads, spec.head_dim_vo, q_dtype_, backend_.caps().device);
  if (!device_) {
    merge_host(out);
    return;
  }
  const auto* recv =
      reinterpret_cast<const float*>(static_cast<const uint8_t*>(device_->workspace.data()) + device_->recv_at);
  parallel::merge_states_cuda(out.data, out.dtype, recv, comm_.size(), n, spec.num_qo_heads, spec.head_dim_vo);
}

void ContextParallelDecode::merge_host(const TensorView& out) {
  const AttentionSpec& spec = backend_.model().layer(layer_);
  const int64_t n = global_->batch_size(), heads = spec.num_qo_heads, dv = spec.head_dim_vo;
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
