// The share layout's checks, the store routing of new tokens, and local_share: one rank's part of a
// global decode batch.
#include <string>

#include "attnkit/context_parallel.h"
#include "attnkit/error.h"

namespace attnkit {

void ShareLayout::validate() const {
  ATTNKIT_CHECK(num_ranks >= 1, "context parallel: num_ranks must be >= 1, got ", num_ranks);
  ATTNKIT_CHECK(kind != ShareKind::contiguous || pages_per_run >= 1,
                "context parallel: a contiguous layout's pages_per_run must be >= 1, got ", pages_per_run);
  ATTNKIT_CHECK(rank_num_pages >= 1, "context parallel: rank_num_pages (pages of each rank's cache) must be >= 1, got ",
                rank_num_pages);
  ATTNKIT_CHECK(int64_t{num_ranks} * rank_num_pages <= INT32_MAX, "context parallel: num_ranks * rank_num_pages (",
                int64_t{num_ranks} * rank_num_pages, ") must fit a 32-bit page index");
}

namespace {
void check_rank(const ShareLayout& layout, int rank) {
  ATTNKIT_CHECK(rank >= 0 && rank < layout.num_ranks, "context parallel: rank must be in 0..", layout.num_ranks - 1,
                ", got ", rank);
}

StoreRoute route_checked(const ForwardBatch& global, const ShareLayout& layout, int rank) {
  StoreRoute route;
  const int page_size = global.page_size;
  for (int i = 0; i < global.batch_size(); ++i) {
    for (int j = 0; j < global.qo_len(i); ++j) {
      const int64_t position = global.prefix_lens[i] + j;
      if (layout.owner(position / page_size) != rank) continue;
      const int32_t page = global.kv_page_indices[global.kv_page_indptr[i] + position / page_size];
      route.token_idx.push_back(global.qo_indptr[i] + j);
      route.slots.push_back(int64_t{layout.local_page(page)} * page_size + position % page_size);
    }
  }
  return route;
}
}  // namespace

void check_sharded_batch(const ForwardBatch& global, const ShareLayout& layout) {
  layout.validate();
  ATTNKIT_CHECK(global.custom_mask.empty(), "context parallel: custom masks are not supported (custom_mask has ",
                global.custom_mask.size(), " entries, expected none)");
  // The global batch against the global page space: every rank's pages, one after another.
  KvCacheConfig space;
  space.page_size = global.page_size;
  space.num_pages = layout.num_ranks * layout.rank_num_pages;
  global.validate(space);
  for (int i = 0; i < global.batch_size(); ++i) {
    for (int j = 0; j < global.num_pages(i); ++j) {
      const int p = global.kv_page_indptr[i] + j;
      const int32_t g = global.kv_page_indices[p];
      ATTNKIT_CHECK(layout.rank_of_page(g) == layout.owner(j), "context parallel: kv_page_indices[", p, "] (request ",
                    i, "'s page ", j, ") is ", g, ", a page of rank ", layout.rank_of_page(g),
                    ", but the share layout puts that page on rank ", layout.owner(j));
    }
  }
}

StoreRoute route_new_tokens(const ForwardBatch& global, const ShareLayout& layout, int rank) {
  check_sharded_batch(global, layout);
  check_rank(layout, rank);
  return route_checked(global, layout, rank);
}

LocalShare local_share(const ForwardBatch& global, const ShareLayout& layout, int rank) {
  layout.validate();
  check_rank(layout, rank);
  ATTNKIT_CHECK(global.mode == ForwardMode::decode, "context parallel: local_share takes a decode batch, got mode ",
                forward_mode_name(global.mode));
  check_sharded_batch(global, layout);
  const int page_size = global.page_size;

  LocalShare s;
  s.rank = rank;
  ForwardBatch& b = s.batch;
  b.mode = ForwardMode::decode;
  b.page_size = page_size;
  b.qo_indptr.push_back(0);
  b.kv_page_indptr.push_back(0);
  for (int i = 0; i < global.batch_size(); ++i) {
    int64_t share_len = 0;
    int last_len = 0;
    for (int j = 0; j < global.num_pages(i); ++j) {
      if (layout.owner(j) != rank) continue;
      b.kv_page_indices.push_back(layout.local_page(global.kv_page_indices[global.kv_page_indptr[i] + j]));
      // Only a request's last page is partly filled; any other page of the share is full.
      last_len = j + 1 == global.num_pages(i) ? global.kv_last_page_len[i] : page_size;
      share_len += last_len;
    }
    if (share_len == 0) {  // nothing of this request here: its partial state is empty (lse -inf)
      continue;
    }
    // The query row is placed at the share's last position: it sees the whole share.
    b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
    b.kv_last_page_len.push_back(last_len);
    b.prefix_lens.push_back(static_cast<int32_t>(share_len - 1));
    b.qo_indptr.push_back(b.qo_indptr.back() + 1);
    b.out_cache_loc.push_back(int64_t{b.kv_page_indices.back()} * page_size + last_len - 1);
    if (!global.request_ids.empty()) b.request_ids.push_back(global.request_ids[static_cast<size_t>(i)]);
    s.request_idx.push_back(i);
  }
  s.store = route_checked(global, layout, rank);
  return s;
}

}  // namespace attnkit
