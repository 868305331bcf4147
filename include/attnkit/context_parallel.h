// Context parallelism: one request's KV history shared out over the ranks of a group, each rank
// attending the query to its share and the partial (output, LSE) pairs merged exactly
// (attnkit/merge.h). The share layout, each rank's share of a batch, the sharded page tables, and
// one rank's decode and causal prefill steps. The collectives are attnkit/communicator.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "attnkit/backend.h"
#include "attnkit/batch.h"
#include "attnkit/communicator.h"
#include "attnkit/kv_cache.h"

namespace attnkit {

// Which rank holds a request's page: by the page's place in the request (its page_idx, 0 = the
// first page), never by the page's address, so the pages already written keep their rank as the
// request grows.
enum class ShareKind {
  contiguous,   // runs of pages_per_run consecutive pages, rank 0's first, then each rank in turn
                // (a request of at most num_ranks * pages_per_run pages is one run a rank)
  interleaved,  // page_idx % num_ranks: the shares differ by at most one page at any length
};

struct ShareLayout {
  ShareKind kind = ShareKind::interleaved;
  int num_ranks = 1;
  int pages_per_run = 1;  // contiguous only
  // Pages of each rank's cache. A page index in a global page table (the batch every rank is given)
  // names page g % rank_num_pages of rank g / rank_num_pages's cache.
  int rank_num_pages = 0;

  int owner(int64_t page_idx) const {
    const int64_t run = kind == ShareKind::contiguous ? page_idx / pages_per_run : page_idx;
    return static_cast<int>(run % num_ranks);
  }
  int rank_of_page(int32_t global_page) const { return global_page / rank_num_pages; }
  int32_t local_page(int32_t global_page) const { return global_page % rank_num_pages; }
  int32_t global_page(int rank, int32_t local_page) const { return rank * rank_num_pages + local_page; }
  // Throws attnkit::Error naming the first field out of range.
  void validate() const;
};

// The new tokens of a global batch (any mode) whose positions are on one rank, and their slots in
// that rank's cache: where each token's K/V is stored.
struct StoreRoute {
  std::vector<int32_t> token_idx;  // indices into the global batch's tokens
  std::vector<int64_t> slots;      // [token_idx.size()]
};

// Checks `global` (its page tables global, ShareLayout) and that each page sits on the rank the
// layout puts it on; throws attnkit::Error naming the field, the value and the expectation.
void check_sharded_batch(const ForwardBatch& global, const ShareLayout& layout);
// Rank `rank`'s part of the new tokens of `global`, after check_sharded_batch.
StoreRoute route_new_tokens(const ForwardBatch& global, const ShareLayout& layout, int rank);

// One rank's part of a global decode batch (see local_share).
struct LocalShare {
  int rank = 0;
  // The requests this rank holds at least one token of, in the global order, with this rank's page
  // ids and its share's lengths; one query row each, attending the whole share (a decode query
  // sees all of its history, so the backend's causal mask is right on any share).
  ForwardBatch batch;
  std::vector<int32_t> request_idx;  // [batch.batch_size()] the global request of each local one
  StoreRoute store;                  // the new tokens this rank stores
};

// Rank `rank`'s share of `global`, a decode batch whose page tables are global (ShareLayout).
// Checks it as check_sharded_batch does; reads no cache.
LocalShare local_share(const ForwardBatch& global, const ShareLayout& layout, int rank);

// The page tables of requests whose KV is shared out over the ranks' caches: build_batch's
// counterpart, allocating each new page from the allocator of the rank the layout puts it on
// (all-or-nothing over every rank) and giving the global batch (global page ids) that every rank
// is handed. The allocators are the ranks' caches' own (in one process), or copies that the
// scheduler keeps of them.
class ShardedPageTables {
 public:
  ShardedPageTables(std::vector<PageAllocator*> allocators, const ShareLayout& layout, int page_size);

  // As attnkit::build_batch (new requests: id -1 and a prefix_len). Custom masks are refused.
  ForwardBatch build_batch(const std::vector<RequestStep>& steps);
  void free_request(RequestId id);
  int64_t length(RequestId id) const;
  const std::vector<int32_t>& pages(RequestId id) const;  // global page ids
  size_t num_requests() const { return requests_.size(); }
  const ShareLayout& layout() const { return layout_; }

 private:
  struct Request {
    int64_t length = 0;
    std::vector<int32_t> pages;
  };
  const Request& request(RequestId id) const;

  std::vector<PageAllocator*> allocators_;
  ShareLayout layout_;
  int page_size_;
  std::unordered_map<RequestId, Request> requests_;
  RequestId next_id_ = 0;
};

// One rank's decode step over its share: stores the new K/V it owns, attends its share with the
// backend (which must return the LSE), all-gathers every rank's (output, LSE) through the
// communicator, and merges them. Per batch: plan(); per layer: attend(), then merge(). With the
// in-process group every rank runs attend() before any runs merge(); with NCCL one rank runs
// both, in that order. Every rank's merge reads the same gathered states in the same order, so
// every rank's output is the same, bit for bit.
//
// On a GPU backend the communicator must gather on the GPU too (NCCL, or InProcessGroup on
// Device::cuda), and the step stays there: plan() uploads the share's index arrays and sizes the
// step's buffers once a batch; attend() and merge() only queue kernels and the collective on the
// calling thread's default stream, where the backends queue theirs, with no host copy or wait.
// On a CPU backend the rows are staged and merged on the host.
//
// A GPU step can be captured in a CUDA graph of that stream (cuda::CapturedGraph, or the engine's
// own capture), layer by layer as it runs eagerly: every rank's attend(), then every rank's
// merge() (with NCCL, each rank's own). plan() stays outside the graph (it uploads from the host
// and may allocate), and one step runs eagerly between the plan and the capture: the in-process
// group allocates its gather buffer at a round's first call (and refuses to while capturing), and
// a backend may set up its launches on first use. The graph holds the plan: the shares' sizes fix
// its launches and the all-gather's size, and a later plan may move the step's buffers, so it
// replays new q, k, v (and whatever the cache holds) until the next plan, and is captured anew
// after one. The backend needs no graph state for that (init_cuda_graph_state is for replaying
// later plans), only a forward that can be captured (planned's can).
//
// Refused (attnkit::Error at plan): sliding windows, sinks, score_mod / mask_mod and custom masks,
// whose positions or softmax terms a share does not see whole.
class ContextParallelDecode {
 public:
  // `backend`'s cache is this rank's; all three outlive this object.
  ContextParallelDecode(Communicator& comm, AttentionBackend& backend, const ShareLayout& layout);
  ~ContextParallelDecode();

  // Once per batch: this rank's share of `global` (a decode batch), planned on the backend. The
  // batch must stay alive and unchanged until the next plan.
  void plan(const ForwardBatch& global);
  // q [batch_size, num_qo_heads, head_dim_qk], k [batch_size, num_kv_heads, head_dim_qk],
  // v [batch_size, num_kv_heads, head_dim_vo] (MLA: v empty): the whole global batch's rows, on the
  // backend's device. Everything is checked before the cache is written.
  void attend(int layer, const TensorView& q, const TensorView& k, const TensorView& v);
  // out [batch_size, num_qo_heads, head_dim_vo] in q's dtype, on the backend's device.
  void merge(const TensorView& out);
  const LocalShare& share() const { return share_; }

 private:
  struct DeviceStep;  // a GPU backend's index arrays and step buffers (decode.cc)
  void plan_device(const ForwardBatch& global);
  void attend_device(int layer, const TensorView& q, const TensorView& k, const TensorView& v);
  void attend_host(int layer, const TensorView& q, const TensorView& k, const TensorView& v);
  void merge_host(const TensorView& out);

  Communicator& comm_;
  AttentionBackend& backend_;
  ShareLayout layout_;
  const ForwardBatch* global_ = nullptr;
  LocalShare share_;
  int layer_ = -1;  // the layer attend() gathered, -1: none yet
  DType q_dtype_ = DType::f32;
  // Rank r's gathered state at r * state_floats: lse [batch_size, num_qo_heads], then
  // o [batch_size, num_qo_heads, head_dim_vo], in f32.
  int64_t state_floats_ = 0;
  std::vector<float> send_host_, recv_host_;  // a CPU backend's
  Buffer send_, recv_;  // a CPU backend's, on the communicator's device where it is not the host
  std::unique_ptr<DeviceStep> device_;  // a GPU backend's
};

// Causal prefill, zig-zag: each request's new tokens are cut into 2 * num_ranks chunks, and rank r
// takes chunks r and 2N-1-r, so that every rank has the same causal work. Chunk c of a prompt of
// `len` tokens starts at zigzag_chunk_begin(len, 2N, c); the first len % (2N) chunks are one token
// longer, so sizes never grow with c.
int64_t zigzag_chunk_begin(int64_t len, int num_chunks, int chunk);
// The global batch's tokens rank `rank` takes, request by request: its chunk r, then 2N-1-r. These
// are the rows of ContextParallelPrefill's q, k, v and out.
std::vector<int32_t> zigzag_rows(const ForwardBatch& global, int num_ranks, int rank);

// One rank's causal prefill of fresh prompts (prefix_lens all 0) whose KV is shared out by the
// layout. Per layer: exchange() all-gathers every rank's K/V chunks through the communicator (one
// collective); attend() stores the tokens whose pages are this rank's into its cache, attends each
// of its query chunks [qa, qb) to every KV chunk [ka, kb) it sees (fully where kb <= qa, with the
// backend's causal mask where it is the same chunk, skipped where ka >= qb) and merges the
// partial states of each row, folded in the order of their KV chunks (the same bits every run),
// in f32 and rounded once to q's dtype. The gathered K/V of the whole batch are held for the
// layer in a scratch cache of one layer, read by two backends of the given registry name: one
// with the layer's causal spec, one with it non-causal. Every layer must have the same spec as
// layer 0; MLA, windows, sinks, modifiers and custom masks are refused.
//
// On a GPU cache the communicator must gather on the GPU too (NCCL, or InProcessGroup on
// Device::cuda), and the step stays there: plan() uploads every index array a layer follows and
// sizes the step's buffers and the scratch cache (kept from batch to batch, grown when a batch
// needs more); exchange() and attend() only queue kernels, the cache stores, the backends and the
// collective on the calling thread's default stream, with no host copy or wait. On the CPU the
// same index arrays are followed by host copies.
class ContextParallelPrefill {
 public:
  // `cache` is this rank's (pages of the layout's rank_num_pages); all outlive this object.
  ContextParallelPrefill(Communicator& comm, const std::string& backend, const ModelSpec& model, KvCache& cache,
                         const ShareLayout& layout);
  ~ContextParallelPrefill();

  // Once per batch; the batch must stay alive and unchanged until the next plan.
  void plan(const ForwardBatch& global);
  // q [rows, num_qo_heads, head_dim_qk], k [rows, num_kv_heads, head_dim_qk],
  // v [rows, num_kv_heads, head_dim_vo]: this rank's zigzag_rows, on the cache's device; read
  // (in stream order on a GPU) by exchange alone, so they need not outlive it.
  void exchange(int layer, const TensorView& q, const TensorView& k, const TensorView& v);
  // out [rows, num_qo_heads, head_dim_vo], q's dtype. After every rank's exchange (in-process).
  void attend(const TensorView& out);
  const std::vector<int32_t>& rows() const { return rows_; }

 private:
  struct Plan;  // parallel/prefill_plan.h
  void plan_device();
  void exchange_host(const TensorView& q, const TensorView& k, const TensorView& v);
  void exchange_device(const TensorView& q, const TensorView& k, const TensorView& v);
  void attend_host(const TensorView& out);
  void attend_device(const TensorView& out);
  Communicator& comm_;
  std::string backend_name_;
  const ModelSpec& model_;
  KvCache& cache_;
  ShareLayout layout_;
  std::vector<int32_t> rows_;
  std::unique_ptr<Plan> plan_;
};

}  // namespace attnkit
