// The free list of KV pages.
#include <algorithm>
#include <random>

#include "attnkit/kv_cache.h"

namespace attnkit {

PageAllocator::PageAllocator(int num_pages) {
  ATTNKIT_CHECK(num_pages >= 0, "num_pages must be >= 0, got ", num_pages);
  owned_.assign(static_cast<size_t>(num_pages), 0);
  free_list_.resize(static_cast<size_t>(num_pages));
  // Popped from the back: hand out page 0 first.
  for (int i = 0; i < num_pages; ++i) free_list_[static_cast<size_t>(i)] = num_pages - 1 - i;
}

std::vector<int32_t> PageAllocator::allocate(int count) {
  ATTNKIT_CHECK(count >= 0, "allocate: count must be >= 0, got ", count);
  if (count > num_free()) {
    throw OutOfPagesError(detail::concat("KV cache out of pages: asked for ", count, ", ", num_free(),
                                         " of ", num_pages(), " free"));
  }
  std::vector<int32_t> pages(free_list_.end() - count, free_list_.end());
  std::reverse(pages.begin(), pages.end());
  free_list_.resize(free_list_.size() - static_cast<size_t>(count));
  for (int32_t p : pages) owned_[static_cast<size_t>(p)] = 1;
  return pages;
}

void PageAllocator::free(std::span<const int32_t> pages) {
  // Check all first, so a bad list frees nothing.
  std::vector<uint8_t> seen(owned_.size(), 0);
  for (int32_t p : pages) {
    ATTNKIT_CHECK(p >= 0 && p < num_pages(), "free: page must be in 0..", num_pages() - 1, ", got ", p);
    ATTNKIT_CHECK(owned_[static_cast<size_t>(p)] && !seen[static_cast<size_t>(p)], "free: page ", p,
                  " is not allocated (double free)");
    seen[static_cast<size_t>(p)] = 1;
  }
  for (int32_t p : pages) {
    owned_[static_cast<size_t>(p)] = 0;
    free_list_.push_back(p);
  }
}

void PageAllocator::shuffle(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::shuffle(free_list_.begin(), free_list_.end(), rng);
}

}  // namespace attnkit
