// ContextParallelPrefill: one rank's zig-zag causal prefill over the all-gathered K/V chunks
// (attnkit/context_parallel.h): the plan, and the host path that a CPU cache takes. A GPU cache's
// path is prefill_device.cc; both follow prefill_plan.h's index arrays.
#include <algorithm>
#include <cstring>

#include "attnkit/context_parallel.h"
#include "attnkit/error.h"
#include "attnkit/merge.h"
#include "attnkit/registry.h"
#include "parallel/checks.h"
#include "parallel/prefill_plan.h"

namespace attnkit {

namespace {

constexpr const char* kWho = "context parallel prefill";

bool same_attention(const AttentionSpec& a, const AttentionSpec& b) {
  return a.num_qo_heads == b.num_qo_heads && a.num_kv_heads == b.num_kv_heads && a.head_dim_qk == b.head_dim_qk &&
         a.head_dim_vo == b.head_dim_vo && a.scale() == b.scale() && a.logits_soft_cap == b.logits_soft_cap &&
         a.causal == b.causal && a.kv_lora_rank == b.kv_lora_rank;
}

// dst row x = src row rows[x] (zeros where rows[x] is -1), rows of `bytes` bytes, their starts
// dst_stride and src_stride bytes apart: the host's parallel::gather_rows_cuda.
void copy_rows(uint8_t* dst, size_t dst_stride, const uint8_t* src, size_t src_stride,
               const std::vector<int32_t>& rows, size_t bytes) {
  for (size_t x = 0; x < rows.size(); ++x) {
    if (rows[x] < 0) {
      std::memset(dst + x * dst_stride, 0, bytes);
    } else {
      std::memcpy(dst + x * dst_stride, src + static_cast<size_t>(rows[x]) * src_stride, bytes);
    }
  }
}

}  // namespace

ContextParallelPrefill::ContextParallelPrefill(Communicator& comm, const std::string& backend, const ModelSpec& model,
                                               KvCache& cache, const ShareLayout& layout)
    : comm_(comm), backend_name_(backend), model_(model), cache_(cache), layout_(layout), plan_(new Plan) {
  layout_.validate();
  ATTNKIT_CHECK(comm_.size() == layout_.num_ranks, "context parallel prefill: the communicator has ", comm_.size(),
                " ranks, expected the layout's num_ranks (", layout_.num_ranks, ")");
  ATTNKIT_CHECK(cache_.config().num_pages == layout_.rank_num_pages, "context parallel prefill: rank ", comm_.rank(),
                "'s cache has ", cache_.config().num_pages, " pages, expected the layout's rank_num_pages (",
                layout_.rank_num_pages, ")");
  ATTNKIT_CHECK(model_.num_layers() >= 1, "context parallel prefill: the model has no layer");
  for (int l = 0; l < model_.num_layers(); ++l) {
    const AttentionSpec& spec = model_.layer(l);
    const char* why = parallel::why_not_shareable(spec);
    ATTNKIT_CHECK(why == nullptr, "context parallel prefill: layer ", l, " has ", why,
                  ", which a share of the history cannot apply");
    ATTNKIT_CHECK(!spec.is_mla() && spec.causal, "context parallel prefill: layer ", l,
                  " must be causal attention without MLA, got ", spec.describe());
    ATTNKIT_CHECK(same_attention(spec, model_.layer(0)), "context parallel prefill: layer ", l, " (", spec.describe(),
                  ") must have layer 0's spec (", model_.layer(0).describe(), ")");
  }
  const Device device = cache_.config().device;
  if (device != Device::cpu) {
    // The gathered K/V and the partial states stay in device memory: a communicator that gathers
    // on the host would need them copied out and back, with a wait, every layer.
    ATTNKIT_CHECK(comm_.device() == device, "context parallel prefill: rank ", comm_.rank(), "'s cache is on ",
                  device_name(device), ", so the communicator must gather on ", device_name(device),
                  " too, got one on ", device_name(comm_.device()), " (InProcessGroup(size, Device::",
                  device_name(device), "), or NCCL)");
  }
  Plan& p = *plan_;
  p.causal_model.name = model_.name + " (causal chunk)";
  p.causal_model.layers = {model_.layer(0)};
  p.full_model.name = model_.name + " (visible chunk)";
  p.full_model.layers = {model_.layer(0)};
  p.full_model.layers[0].causal = false;
}

ContextParallelPrefill::~ContextParallelPrefill() = default;

void ContextParallelPrefill::plan(const ForwardBatch& global) {
  Plan& p = *plan_;
  p.global = nullptr;  // a failed plan leaves nothing to exchange with
  p.layer = -1;
  ATTNKIT_CHECK(global.mode != ForwardMode::decode,
                "context parallel prefill: the batch mode must be extend or mixed, got decode "
                "(ContextParallelDecode runs those)");
  const int ps = cache_.config().page_size;
  p.idx = parallel::prefill_indices(global, layout_, comm_.rank(), ps);
  if (!p.full || p.scratch->config().num_pages < p.idx.scratch_pages) {
    // A larger scratch cache, and backends over it (the full one made last: where it is, all are);
    // a smaller batch keeps the ones there are.
    p.causal.reset();
    p.full.reset();
    p.scratch.reset();
    KvCacheConfig cfg = KvCacheConfig::for_spec(model_.layer(0), 1);
    cfg.page_size = ps;
    cfg.num_pages = std::max(p.idx.scratch_pages, 1);
    cfg.dtype = cache_.config().dtype;
    cfg.k_scale = cache_.config().k_scale;
    cfg.v_scale = cache_.config().v_scale;
    cfg.device = cache_.config().device;
    p.scratch = std::make_unique<KvCache>(cfg);
    p.causal = create_backend(backend_name_, {&p.causal_model, p.scratch.get()});
    p.full = create_backend(backend_name_, {&p.full_model, p.scratch.get()});
  }
  ATTNKIT_CHECK(p.causal->caps().lse, "context parallel prefill: backend ", p.causal->name(),
                " does not return the LSE, which the merge needs (capabilities().lse is false)");
  // The backends keep pointers to the batches they plan: p.idx's, which live until the next plan.
  if (p.idx.causal_batch.batch_size() > 0) p.causal->init_forward_metadata(p.idx.causal_batch);
  if (p.idx.full_batch.batch_size() > 0) p.full->init_forward_metadata(p.idx.full_batch);
  // Sized for f32 rows, the widest a step takes; every layer has layer 0's spec.
  const size_t bytes = parallel::prefill_layout(model_.layer(0), p.idx, comm_.size(), sizeof(float),
                                                sizeof(float)).bytes;
  if (p.workspace.nbytes() < bytes) {
    p.workspace = Buffer(cache_.config().device, bytes);
    // The host path widens the padding rows between the two batches' partial outputs too, which
    // no backend writes: never uninitialised memory.
    p.workspace.fill_bytes(0);
  }
  if (cache_.config().device != Device::cpu) plan_device();
  rows_ = zigzag_rows(global, layout_.num_ranks, comm_.rank());
  p.global = &global;
}

void ContextParallelPrefill::exchange(int layer, const TensorView& q, const TensorView& k, const TensorView& v) {
  ATTNKIT_CHECK(plan_->global != nullptr, "context parallel prefill: plan must be called before exchange");
  ATTNKIT_CHECK(layer >= 0 && layer < model_.num_layers(), "context parallel prefill: layer must be in 0..",
                model_.num_layers() - 1, ", got ", layer);
  Plan& p = *plan_;
  const AttentionSpec& spec = model_.layer(layer);
  const auto rows = static_cast<int64_t>(rows_.size());
  const Device device = cache_.config().device;
  parallel::check_rows(kWho, "q", q, rows, spec.num_qo_heads, spec.head_dim_qk, q.dtype, device);
  parallel::check_rows(kWho, "k", k, rows, spec.num_kv_heads, spec.head_dim_qk, q.dtype, device);
  parallel::check_rows(kWho, "v", v, rows, spec.num_kv_heads, spec.head_dim_vo, q.dtype, device);
  p.layer = -1;  // until this exchange has gone through
  p.q_dtype = q.dtype;
  p.part_dtype = parallel::partial_dtype(p.causal->caps(), q.dtype);
  if (device == Device::cpu) {
    exchange_host(q, k, v);
  } else {
    exchange_device(q, k, v);
  }
  p.layer = layer;
}

void ContextParallelPrefill::attend(const TensorView& out) {
  ATTNKIT_CHECK(plan_->global != nullptr && plan_->layer >= 0,
                "context parallel prefill: exchange must be called before attend");
  const Plan& p = *plan_;
  const AttentionSpec& spec = model_.layer(p.layer);
  const Device device = cache_.config().device;
  parallel::check_rows(kWho, "out", out, static_cast<int64_t>(rows_.size()), spec.num_qo_heads, spec.head_dim_vo,
                       p.q_dtype, device);
  if (device == Device::cpu) {
    attend_host(out);
  } else {
    attend_device(out);
  }
}

void ContextParallelPrefill::Plan::store_rows(KvCache& cache, int layer, int num_ranks, const int64_t* stored_slots,
                                              const int64_t* scratch_slots) const {
  const Regions r = regions(num_ranks);
  const Device device = cache.config().device;
  auto rows = [&](int64_t n) {
    return std::pair{TensorView(r.k, q_dtype, device, {n, spec().num_kv_heads, spec().head_dim_qk}),
                     TensorView(r.v, q_dtype, device, {n, spec().num_kv_heads, spec().head_dim_vo})};
  };
  if (idx.num_stored() > 0) {
    const auto [k, v] = rows(idx.num_stored());
    cache.store(layer, k, v, TensorView(const_cast<int64_t*>(stored_slots), DType::i64, device, {idx.num_stored()}));
  }
  if (idx.num_tokens() > 0) {
    const auto [k, v] = rows(idx.num_tokens());
    scratch->store(0, k, v, TensorView(const_cast<int64_t*>(scratch_slots), DType::i64, device, {idx.num_tokens()}));
  }
}

void ContextParallelPrefill::Plan::attend_pairs(int num_ranks) const {
  const Regions r = regions(num_ranks);
  const int64_t heads = spec().num_qo_heads, dk = spec().head_dim_qk, dv = spec().head_dim_vo;
  const Device device = scratch->config().device;
  const int64_t full_rows = idx.num_partial() - idx.full_first;
  const size_t part_bytes = dtype_size(part_dtype);
  for (auto [backend, first, num] : {std::tuple{causal.get(), int64_t{0}, idx.num_causal()},
                                     std::tuple{full.get(), int64_t{idx.full_first}, full_rows}}) {
    if (num == 0) continue;
    const auto at = static_cast<size_t>(first * heads);
    backend->forward(0, TensorView(r.q + at * dk * part_bytes, part_dtype, device, {num, heads, dk}), TensorView(),
                     TensorView(), TensorView(r.o + at * dv * part_bytes, part_dtype, device, {num, heads, dv}),
                     TensorView(r.lse + at, DType::f32, device, {num, heads}));
  }
}

void ContextParallelPrefill::exchange_host(const TensorView& q, const TensorView& k, const TensorView& v) {
  Plan& p = *plan_;
  const Plan::Regions r = p.regions(comm_.size());
  // Row sizes from the spec: a rank whose chunks are all empty gives as many bytes as the others.
  const AttentionSpec& spec = p.spec();
  const size_t k_row = static_cast<size_t>(spec.num_kv_heads * spec.head_dim_qk) * dtype_size(q.dtype);
  const size_t v_row = static_cast<size_t>(spec.num_kv_heads * spec.head_dim_vo) * dtype_size(q.dtype);
  // This rank's rows of the gather, K then V a row, the padding zeroed.
  copy_rows(r.send, k_row + v_row, static_cast<const uint8_t*>(k.data), k_row, p.idx.send_rows, k_row);
  copy_rows(r.send + k_row, k_row + v_row, static_cast<const uint8_t*>(v.data), v_row, p.idx.send_rows, v_row);
  const size_t bytes = static_cast<size_t>(p.idx.gather_rows) * (k_row + v_row);
  if (comm_.device() == Device::cpu) {
    comm_.all_gather_bytes(r.send, r.recv, bytes);
  } else {
    if (p.send_dev.nbytes() < bytes) {
      p.send_dev = Buffer(comm_.device(), bytes);
      p.recv_dev = Buffer(comm_.device(), bytes * static_cast<size_t>(comm_.size()));
    }
    p.send_dev.copy_from_host(r.send, bytes);
    comm_.all_gather_bytes(p.send_dev.data(), p.recv_dev.data(), bytes);
  }
  // The query rows of the pairs, in the partial dtype, taken now: q need not outlive this call.
  const int64_t q_elems = spec.num_qo_heads * int64_t{spec.head_dim_qk};
  for (size_t x = 0; x < p.idx.q_rows.size(); ++x) {
    const int64_t row = p.idx.q_rows[x];
    for (int64_t e = 0; e < q_elems; ++e) {
      store_from_float(r.q, p.part_dtype, static_cast<int64_t>(x) * q_elems + e,
                       row < 0 ? 0.0f : load_as_float(q.data, q.dtype, row * q_elems + e));
    }
  }
}

void ContextParallelPrefill::attend_host(const TensorView& out) {
  const Plan& p = *plan_;
  const parallel::PrefillIndices& idx = p.idx;
  const Plan::Regions r = p.regions(comm_.size());
  const int64_t heads = p.spec().num_qo_heads, dv = p.spec().head_dim_vo;
  const size_t k_row = static_cast<size_t>(p.spec().num_kv_heads * p.spec().head_dim_qk) * dtype_size(p.q_dtype);
  const size_t v_row = static_cast<size_t>(p.spec().num_kv_heads * dv) * dtype_size(p.q_dtype);
  if (comm_.device() != Device::cpu) {
    synchronize(comm_.device());
    p.recv_dev.copy_to_host(r.recv, static_cast<size_t>(idx.gather_rows * comm_.size()) * (k_row + v_row));
  }
  // Every token's K/V out of the gather: this rank's stored ones (first) into its cache, all into
  // the scratch cache.
  copy_rows(r.k, k_row, r.recv, k_row + v_row, idx.kv_rows, k_row);
  copy_rows(r.v, v_row, r.recv + k_row, k_row + v_row, idx.kv_rows, v_row);
  p.store_rows(cache_, p.layer, comm_.size(), idx.stored_slots.data(), idx.scratch_slots.data());
  p.attend_pairs(comm_.size());
  std::vector<float> o32(static_cast<size_t>(idx.num_partial() * heads * dv));
  for (size_t e = 0; e < o32.size(); ++e) o32[e] = load_as_float(r.o, p.part_dtype, static_cast<int64_t>(e));

  // Each row merged over its pairs in their order, then rounded once to q's dtype.
  std::vector<float> o(static_cast<size_t>(heads * dv)), lse(static_cast<size_t>(heads));
  for (int64_t x = 0; x < idx.num_rows(); ++x) {
    std::vector<AttentionState> parts;
    for (int32_t j = idx.merge_indptr[static_cast<size_t>(x)]; j < idx.merge_indptr[static_cast<size_t>(x) + 1]; ++j) {
      const int64_t part = idx.merge_parts[static_cast<size_t>(j)];
      parts.push_back({TensorView(o32.data() + part * heads * dv, DType::f32, Device::cpu, {1, heads, dv}),
                       TensorView(r.lse + part * heads, DType::f32, Device::cpu, {1, heads})});
    }
    merge_states(parts, {TensorView(o.data(), DType::f32, Device::cpu, {1, heads, dv}),
                         TensorView(lse.data(), DType::f32, Device::cpu, {1, heads})});
    for (size_t e = 0; e < o.size(); ++e) {
      store_from_float(out.data, out.dtype, x * heads * dv + static_cast<int64_t>(e), o[e]);
    }
  }
}

}  // namespace attnkit
