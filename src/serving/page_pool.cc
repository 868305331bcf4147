// PagePool over one cache, and over the ranks' caches of a context-parallel group.
#include "serving/page_pool.h"

#include <algorithm>

#include "attnkit/error.h"

namespace attnkit::serving {

namespace {

int64_t pages_for(int64_t tokens, int page_size) { return (tokens + page_size - 1) / page_size; }

std::vector<PageAllocator*> allocators_of(const std::vector<KvCache*>& caches) {
  std::vector<PageAllocator*> allocators;
  for (KvCache* cache : caches) {
    ATTNKIT_CHECK(cache != nullptr, "page pool: a rank's cache must not be null");
    allocators.push_back(&cache->allocator());
  }
  return allocators;
}

int first_page_size(const std::vector<KvCache*>& caches) {
  ATTNKIT_CHECK(!caches.empty() && caches.front() != nullptr, "page pool: needs one cache a rank, got none");
  return caches.front()->config().page_size;
}

}  // namespace

int64_t CachePagePool::pages_needed(int64_t held_tokens, int64_t more_tokens) const {
  return pages_for(held_tokens + more_tokens, page_size()) - pages_for(held_tokens, page_size());
}

ForwardBatch CachePagePool::build_batch(const std::vector<RequestStep>& steps) {
  return attnkit::build_batch(cache_, steps);
}

ShardedPagePool::ShardedPagePool(const std::vector<KvCache*>& caches, const ShareLayout& layout)
    : allocators_(allocators_of(caches)),
      layout_(layout),
      page_size_(first_page_size(caches)),
      tables_(allocators_, layout, page_size_),
      peak_(static_cast<size_t>(layout.num_ranks), 0) {
  for (size_t r = 0; r < caches.size(); ++r) {
    ATTNKIT_CHECK(caches[r]->config().page_size == page_size_, "page pool: rank ", r, "'s cache has pages of ",
                  caches[r]->config().page_size, " tokens, rank 0's ", page_size_, ": every rank's must match");
  }
}

int ShardedPagePool::num_free() const {
  int fewest = layout_.rank_num_pages;
  for (const PageAllocator* a : allocators_) fewest = std::min(fewest, a->num_free());
  return fewest;
}

int64_t ShardedPagePool::pages_needed(int64_t held_tokens, int64_t more_tokens) const {
  std::vector<int64_t> per_rank(allocators_.size(), 0);
  const int64_t end = pages_for(held_tokens + more_tokens, page_size_);
  for (int64_t page_idx = pages_for(held_tokens, page_size_); page_idx < end; ++page_idx) {
    ++per_rank[static_cast<size_t>(layout_.owner(page_idx))];
  }
  return *std::max_element(per_rank.begin(), per_rank.end());
}

int ShardedPagePool::pages_in_use() const {
  int used = 0;
  for (const PageAllocator* a : allocators_) used += a->num_pages() - a->num_free();
  return used;
}

ForwardBatch ShardedPagePool::build_batch(const std::vector<RequestStep>& steps) {
  ForwardBatch batch = tables_.build_batch(steps);
  for (size_t r = 0; r < allocators_.size(); ++r) {
    peak_[r] = std::max(peak_[r], allocators_[r]->num_pages() - allocators_[r]->num_free());
  }
  return batch;
}

}  // namespace attnkit::serving
