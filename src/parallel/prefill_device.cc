// ContextParallelPrefill on a GPU cache (attnkit/context_parallel.h): the plan's index arrays
// uploaded once a batch, then each layer's step as kernels (decode_kernels.h), cache stores, the
// two backends and the all-gather, all queued on the calling thread's default stream (where the
// backends and the cache store queue theirs), with no host copy or wait.
#include "attnkit/context_parallel.h"
#include "attnkit/error.h"
#include "parallel/decode_kernels.h"
#include "parallel/index_upload.h"
#include "parallel/prefill_plan.h"

namespace attnkit {

void ContextParallelPrefill::plan_device() {
  Plan& p = *plan_;
  const parallel::PrefillIndices& idx = p.idx;
  parallel::IndexUpload up;  // the i64 slots first, then the i32 arrays
  const size_t scratch_slots = up.add(idx.scratch_slots), stored_slots = up.add(idx.stored_slots);
  const size_t send_rows = up.add(idx.send_rows), kv_rows = up.add(idx.kv_rows), q_rows = up.add(idx.q_rows);
  const size_t merge_indptr = up.add(idx.merge_indptr), merge_parts = up.add(idx.merge_parts);
  const uint8_t* base = up.upload(p.index, cache_.config().device);
  p.scratch_slots = reinterpret_cast<const int64_t*>(base + scratch_slots);
  p.stored_slots = reinterpret_cast<const int64_t*>(base + stored_slots);
  p.send_rows = reinterpret_cast<const int32_t*>(base + send_rows);
  p.kv_rows = reinterpret_cast<const int32_t*>(base + kv_rows);
  p.q_rows = reinterpret_cast<const int32_t*>(base + q_rows);
  p.merge_indptr = reinterpret_cast<const int32_t*>(base + merge_indptr);
  p.merge_parts = reinterpret_cast<const int32_t*>(base + merge_parts);
}

void ContextParallelPrefill::exchange_device(const TensorView& q, const TensorView& k, const TensorView& v) {
  const Plan& p = *plan_;
  const Plan::Regions r = p.regions(comm_.size());
  const int64_t k_elems = int64_t{p.spec().num_kv_heads} * p.spec().head_dim_qk;
  const int64_t v_elems = int64_t{p.spec().num_kv_heads} * p.spec().head_dim_vo;
  // This rank's rows of the gather, K then V a row, the padding zeroed (the bytes sent are the
  // same every run). A rank with no rows reads nothing of k and v.
  parallel::gather_rows_cuda(p.send_rows, p.idx.gather_rows,
                             {.dst = r.send, .dst_dtype = q.dtype, .src = k.data, .src_dtype = k.dtype,
                              .row_elems = k_elems, .dst_stride = k_elems + v_elems},
                             {.dst = r.send + static_cast<size_t>(k_elems) * dtype_size(q.dtype),
                              .dst_dtype = q.dtype, .src = v.data, .src_dtype = v.dtype, .row_elems = v_elems,
                              .dst_stride = k_elems + v_elems});
  // No stream: the calling thread's default one, where the kernels around it queue.
  const auto row_bytes = static_cast<size_t>(k_elems + v_elems) * dtype_size(q.dtype);
  comm_.all_gather_bytes(r.send, r.recv, static_cast<size_t>(p.idx.gather_rows) * row_bytes);
  // The query rows of the pairs, in the partial dtype, taken now: q need not outlive this call.
  parallel::gather_rows_cuda(p.q_rows, p.idx.num_partial(),
                             {.dst = r.q, .dst_dtype = p.part_dtype, .src = q.data, .src_dtype = q.dtype,
                              .row_elems = int64_t{p.spec().num_qo_heads} * p.spec().head_dim_qk});
}

void ContextParallelPrefill::attend_device(const TensorView& out) {
  const Plan& p = *plan_;
  const Plan::Regions r = p.regions(comm_.size());
  const int64_t k_elems = int64_t{p.spec().num_kv_heads} * p.spec().head_dim_qk;
  const int64_t v_elems = int64_t{p.spec().num_kv_heads} * p.spec().head_dim_vo;
  // Every token's K/V out of the gather (every rank's part is in by now, in stream order): this
  // rank's stored ones (first) into its cache, all into the scratch cache.
  parallel::gather_rows_cuda(p.kv_rows, p.idx.num_tokens(),
                             {.dst = r.k, .dst_dtype = p.q_dtype, .src = r.recv, .src_dtype = p.q_dtype,
                              .row_elems = k_elems, .src_stride = k_elems + v_elems},
                             {.dst = r.v, .dst_dtype = p.q_dtype,
                              .src = r.recv + static_cast<size_t>(k_elems) * dtype_size(p.q_dtype),
                              .src_dtype = p.q_dtype, .row_elems = v_elems, .src_stride = k_elems + v_elems});
  p.store_rows(cache_, p.layer, comm_.size(), p.stored_slots, p.scratch_slots);
  p.attend_pairs(comm_.size());
  // Each row's pairs merged in their order, in f32, and rounded once into out (q's dtype).
  parallel::merge_partials_cuda(out.data, out.dtype, r.o, p.part_dtype, r.lse, p.merge_indptr, p.merge_parts,
                                p.idx.num_rows(), p.spec().num_qo_heads, p.spec().head_dim_vo);
}

}  // namespace attnkit
