// Where the scheduler's requests keep their KV pages: one cache, or the ranks' caches of a
// context-parallel group (each page on the rank the share layout names). The scheduler counts the
// pages a step takes before it builds the batch, so that the batch always fits; each pool counts
// in a unit in which such a count is a promise.
#pragma once

#include <cstdint>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/context_parallel.h"
#include "attnkit/kv_cache.h"

namespace attnkit::serving {

class PagePool {
 public:
  virtual ~PagePool() = default;
  virtual int page_size() const = 0;
  // capacity(), num_free() and pages_needed() count in one unit: a page of the cache; for a
  // sharded pool, a page of one rank, a request's growth counted on the rank that gives most of it.
  // Needs summed over a batch then never exceed what any single rank has free.
  virtual int capacity() const = 0;
  virtual int num_free() const = 0;
  // What growing a request from `held_tokens` to `held_tokens + more_tokens` takes.
  virtual int64_t pages_needed(int64_t held_tokens, int64_t more_tokens) const = 0;
  virtual int pages_in_use() const = 0;  // pages allocated, every rank's together
  virtual int64_t num_requests() const = 0;
  virtual ForwardBatch build_batch(const std::vector<RequestStep>& steps) = 0;
  virtual void free_request(RequestId id) = 0;
};

// One cache: its pages and its build_batch.
class CachePagePool final : public PagePool {
 public:
  explicit CachePagePool(KvCache& cache) : cache_(cache) {}
  int page_size() const override { return cache_.config().page_size; }
  int capacity() const override { return cache_.allocator().num_pages(); }
  int num_free() const override { return cache_.allocator().num_free(); }
  int64_t pages_needed(int64_t held_tokens, int64_t more_tokens) const override;
  int pages_in_use() const override { return capacity() - num_free(); }
  int64_t num_requests() const override { return cache_.num_requests(); }
  ForwardBatch build_batch(const std::vector<RequestStep>& steps) override;
  void free_request(RequestId id) override { cache_.free_request(id); }

 private:
  KvCache& cache_;
};

// The ranks' caches of a context-parallel group (rank r's cache is caches[r], each of the layout's
// rank_num_pages pages): batches carry global page ids (ShardedPageTables).
class ShardedPagePool final : public PagePool {
 public:
  ShardedPagePool(const std::vector<KvCache*>& caches, const ShareLayout& layout);
  int page_size() const override { return page_size_; }
  int capacity() const override { return layout_.rank_num_pages; }
  int num_free() const override;  // the fullest rank's free pages
  int64_t pages_needed(int64_t held_tokens, int64_t more_tokens) const override;
  int pages_in_use() const override;
  int64_t num_requests() const override { return static_cast<int64_t>(tables_.num_requests()); }
  ForwardBatch build_batch(const std::vector<RequestStep>& steps) override;
  void free_request(RequestId id) override { tables_.free_request(id); }

  const ShareLayout& layout() const { return layout_; }
  const std::vector<int>& peak_pages_per_rank() const { return peak_; }

 private:
  std::vector<PageAllocator*> allocators_;
  ShareLayout layout_;
  int page_size_ = 0;
  ShardedPageTables tables_;
  std::vector<int> peak_;  // [num_ranks] the most pages each rank has held at once
};

}  // namespace attnkit::serving
