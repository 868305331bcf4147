// What ContextParallelPrefill's plan works out once a batch, and where a layer's step keeps its
// rows: shared by its host path (prefill.cc) and its device path (prefill_device.cc), which follow
// the same index arrays, the one with host copies, the other with kernels.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "attnkit/context_parallel.h"

namespace attnkit::parallel {

// Every index array a layer's step follows. A row is one token's [heads, dim] values.
struct PrefillIndices {
  // The all-gather: each rank gives gather_rows rows, each one token's K then V (q's dtype):
  // request by request its two chunks, each padded to the longest chunk of the request, so that
  // every rank gives as many bytes.
  int64_t gather_rows = 0;
  std::vector<int32_t> send_rows;  // [gather_rows] the row of this rank's k and v given there; -1: padding
  // Every token of the batch: the gathered row (rank * gather_rows + row) holding its K/V and its
  // slot in the scratch cache; the tokens this rank stores in its own cache come first, their
  // slots there in stored_slots.
  std::vector<int32_t> kv_rows;        // [num_tokens]
  std::vector<int64_t> scratch_slots;  // [num_tokens]
  std::vector<int64_t> stored_slots;   // [num_stored]
  int32_t scratch_pages = 0;
  // Every (query chunk, KV chunk) pair this rank computes, over the scratch cache: the diagonal
  // ones (causal) and the earlier, wholly visible ones (full). Their query rows are q_rows' (this
  // rank's row of each), the causal batch's first and the full batch's from row full_first, and
  // so are their partial output rows. full_first is a multiple of kBatchAlignRows, so that each
  // batch's rows start as aligned as the workspace's regions; the rows between are padding (-1).
  static constexpr int32_t kBatchAlignRows = 32;
  ForwardBatch causal_batch, full_batch;
  std::vector<int32_t> q_rows;
  int32_t full_first = 0;
  // Output row x merges the partial rows merge_parts[merge_indptr[x] .. merge_indptr[x + 1]), in
  // the order of their KV chunks: a fixed order, so every run gives the same bits.
  std::vector<int32_t> merge_indptr;  // [rows + 1]
  std::vector<int32_t> merge_parts;

  int64_t num_tokens() const { return static_cast<int64_t>(kv_rows.size()); }
  int64_t num_stored() const { return static_cast<int64_t>(stored_slots.size()); }
  int64_t num_causal() const { return causal_batch.num_tokens(); }
  int64_t num_partial() const { return static_cast<int64_t>(q_rows.size()); }
  int64_t num_rows() const { return static_cast<int64_t>(merge_indptr.size()) - 1; }
};

// Rank `rank`'s indices for `global` (fresh prompts; checked as ContextParallelPrefill::plan says),
// the scratch cache's pages `page_size` tokens.
PrefillIndices prefill_indices(const ForwardBatch& global, const ShareLayout& layout, int rank, int page_size);

// Where a layer's step keeps its rows, in bytes from the workspace's start, each region 256-byte
// aligned: the rows this rank gives [gather_rows] and every rank's [num_ranks * gather_rows] (K
// then V a row, kv_bytes an element), the batch's K and V rows for the stores [num_tokens]
// (kv_bytes), the query rows [num_partial, heads, dk] and partial outputs [.., heads, dv]
// (part_bytes), their lse [.., heads] f32.
struct PrefillLayout {
  size_t send = 0, recv = 0, k = 0, v = 0, q = 0, o = 0, lse = 0, bytes = 0;
};
PrefillLayout prefill_layout(const AttentionSpec& spec, const PrefillIndices& idx, int num_ranks, size_t kv_bytes,
                             size_t part_bytes);

}  // namespace attnkit::parallel

namespace attnkit {

// What a plan keeps: the batch's indices, the scratch cache with its two backends and the step's
// buffers. The last ones are kept from batch to batch and grown only when a batch needs more.
struct ContextParallelPrefill::Plan {
  const ForwardBatch* global = nullptr;  // null: no batch planned
  parallel::PrefillIndices idx;
  ModelSpec causal_model, full_model;  // one layer each: layer 0's spec, causal and not
  std::unique_ptr<KvCache> scratch;    // the gathered K/V of one layer
  std::unique_ptr<AttentionBackend> causal, full;
  Buffer workspace;  // PrefillLayout's regions, on the cache's device
  // The device path's copy of idx's arrays (one upload a plan) and where each one starts.
  Buffer index;
  const int64_t* scratch_slots = nullptr;
  const int64_t* stored_slots = nullptr;
  const int32_t* send_rows = nullptr;
  const int32_t* kv_rows = nullptr;
  const int32_t* q_rows = nullptr;
  const int32_t* merge_indptr = nullptr;
  const int32_t* merge_parts = nullptr;
  Buffer send_dev, recv_dev;  // the host path's gather, where the communicator's device is not the host
  int layer = -1;             // the layer exchange() gathered, -1: none yet
  DType q_dtype = DType::f32;
  DType part_dtype = DType::f32;  // the partial outputs' (parallel::partial_dtype)

  const AttentionSpec& spec() const { return causal_model.layers[0]; }  // every layer's, causal
  // The workspace's regions (PrefillLayout) for the dtypes of the last exchange.
  struct Regions {
    uint8_t *send, *recv, *k, *v, *q, *o;
    float* lse;
  };
  Regions regions(int num_ranks) const {
    const parallel::PrefillLayout l =
        parallel::prefill_layout(spec(), idx, num_ranks, dtype_size(q_dtype), dtype_size(part_dtype));
    auto* w = static_cast<uint8_t*>(workspace.data());
    return {w + l.send, w + l.recv, w + l.k, w + l.v, w + l.q, w + l.o, reinterpret_cast<float*>(w + l.lse)};
  }
  // The K/V rows gathered into the workspace (this rank's stored tokens first) into `cache` at
  // `layer`, at stored_slots, and all of them into the scratch cache at scratch_slots (both on the
  // caches' device). Both paths' (prefill.cc).
  void store_rows(KvCache& cache, int layer, int num_ranks, const int64_t* stored_slots,
                  const int64_t* scratch_slots) const;
  // Each pair's partial state, from the workspace's query rows into its o and lse rows.
  void attend_pairs(int num_ranks) const;
};

}  // namespace attnkit
