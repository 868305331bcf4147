// Context parallelism: one request's KV history shared out over the ranks of a group, each rank
// attending the query to its share and the partial (output, LSE) pairs merged exactly
// (attnkit/merge.h). The share layout, each rank's share of a batch and the sharded page tables. The
// collectives are attnkit/communicator.h's.
#pragma once

#include <cstdint>
#include <memory>
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
  int pages_per_run = 1;   // contiguous only
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

// One rank's part of a global decode batch (see local_share).
struct LocalShare {
  int rank = 0;
  // The requests this rank holds at least one token of, in the global order, with this rank's page
  // ids and its share's lengths; one query row each, attending the whole share (a decode query
  // sees all of its history, so the backend's causal mask is right on any share).
  ForwardBatch batch;
  std::vector<int32_t> request_idx;      // [batch.batch_size()] the global request of each local one
  // The global batch's new tokens whose position is on this rank, and their slots in its cache.
  std::vector<int32_t> store_token_idx;  // indices into the global batch's tokens
  std::vector<int64_t> store_slots;      // [store_token_idx.size()]
};

// Rank `rank`'s share of `global`, a decode batch whose page tables are global (ShareLayout).
// Checks the batch and that each page sits on the rank the layout puts it on, and throws
// attnkit::Error naming the field, the value and the expectation; reads no cache.
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

}  // namespace attnkit
