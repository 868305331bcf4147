// ShardedPageTables: requests' page tables with each page on the rank the share layout names.
#include <algorithm>

#include "attnkit/context_parallel.h"
#include "attnkit/error.h"

namespace attnkit {

ShardedPageTables::ShardedPageTables(std::vector<PageAllocator*> allocators, const ShareLayout& layout, int page_size)
    : allocators_(std::move(allocators)), layout_(layout), page_size_(page_size) {
  layout_.validate();
  ATTNKIT_CHECK(page_size_ >= 1 && page_size_ <= 256, "context parallel: page_size must be in 1..256, got ",
                page_size_);
  ATTNKIT_CHECK(allocators_.size() == static_cast<size_t>(layout_.num_ranks),
                "context parallel: allocators must hold one allocator a rank (", layout_.num_ranks, "), got ",
                allocators_.size());
  for (size_t r = 0; r < allocators_.size(); ++r) {
    ATTNKIT_CHECK(allocators_[r] != nullptr, "context parallel: allocators[", r, "] must not be null");
    ATTNKIT_CHECK(allocators_[r]->num_pages() == layout_.rank_num_pages, "context parallel: allocators[", r, "] has ",
                  allocators_[r]->num_pages(), " pages, expected the layout's rank_num_pages (", layout_.rank_num_pages,
                  ")");
  }
}

const ShardedPageTables::Request& ShardedPageTables::request(RequestId id) const {
  auto it = requests_.find(id);
  ATTNKIT_CHECK(it != requests_.end(), "context parallel: request ", id, " is not in the page tables");
  return it->second;
}

int64_t ShardedPageTables::length(RequestId id) const { return request(id).length; }
const std::vector<int32_t>& ShardedPageTables::pages(RequestId id) const { return request(id).pages; }

void ShardedPageTables::free_request(RequestId id) {
  for (int32_t g : request(id).pages) {
    const int32_t local = layout_.local_page(g);
    allocators_[static_cast<size_t>(layout_.rank_of_page(g))]->free(std::span<const int32_t>(&local, 1));
  }
  requests_.erase(id);
}

ForwardBatch ShardedPageTables::build_batch(const std::vector<RequestStep>& steps) {
  // Every step's lengths, and the pages each rank must give, before anything is allocated.
  std::vector<int64_t> prefix(steps.size()), have(steps.size());
  std::vector<int> needed(allocators_.size(), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const RequestStep& s = steps[i];
    ATTNKIT_CHECK(s.num_new_tokens >= 0, "context parallel: steps[", i, "].num_new_tokens must be >= 0, got ",
                  s.num_new_tokens);
    ATTNKIT_CHECK(s.prefix_len >= 0 && (s.id < 0 || s.prefix_len == 0), "context parallel: steps[", i,
                  "].prefix_len must be >= 0, and 0 for an existing request, got ", s.prefix_len);
    ATTNKIT_CHECK(s.custom_mask.empty(), "context parallel: steps[", i, "].custom_mask must be empty (custom masks ",
                  "are not supported), got ", s.custom_mask.size(), " entries");
    prefix[i] = s.id >= 0 ? length(s.id) : s.prefix_len;
    have[i] = s.id >= 0 ? static_cast<int64_t>(pages(s.id).size()) : 0;
    const int64_t need = (prefix[i] + s.num_new_tokens + page_size_ - 1) / page_size_;
    for (int64_t j = have[i]; j < need; ++j) ++needed[static_cast<size_t>(layout_.owner(j))];
  }
  for (size_t r = 0; r < allocators_.size(); ++r) {
    if (needed[r] > allocators_[r]->num_free()) {
      throw OutOfPagesError(detail::concat("context parallel: rank ", r,
                                           "'s KV cache is out of pages: the batch needs ", needed[r], ", ",
                                           allocators_[r]->num_free(), " of ", allocators_[r]->num_pages(), " free"));
    }
  }

  ForwardBatch b;
  b.page_size = page_size_;
  b.qo_indptr.push_back(0);
  b.kv_page_indptr.push_back(0);
  for (size_t i = 0; i < steps.size(); ++i) {
    const RequestStep& s = steps[i];
    RequestId id = s.id;
    if (id < 0) {
      id = next_id_++;
      requests_.emplace(id, Request{});
    }
    Request& r = requests_.at(id);
    const int64_t kv_len = prefix[i] + s.num_new_tokens;
    for (int64_t j = static_cast<int64_t>(r.pages.size()); j * page_size_ < kv_len; ++j) {
      const int rank = layout_.owner(j);
      r.pages.push_back(layout_.global_page(rank, allocators_[static_cast<size_t>(rank)]->allocate(1)[0]));
    }
    r.length = kv_len;
    b.request_ids.push_back(id);
    b.prefix_lens.push_back(static_cast<int32_t>(prefix[i]));
    b.qo_indptr.push_back(b.qo_indptr.back() + static_cast<int32_t>(s.num_new_tokens));
    b.kv_page_indices.insert(b.kv_page_indices.end(), r.pages.begin(), r.pages.end());
    b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
    b.kv_last_page_len.push_back(kv_len == 0 ? 0 : static_cast<int32_t>((kv_len - 1) % page_size_ + 1));
    for (int64_t t = prefix[i]; t < kv_len; ++t) {
      b.out_cache_loc.push_back(int64_t{r.pages[static_cast<size_t>(t / page_size_)]} * page_size_ + t % page_size_);
    }
  }
  b.mode = forward_mode_of(b.qo_indptr);
  return b;
}

}  // namespace attnkit
