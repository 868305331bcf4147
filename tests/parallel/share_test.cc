// The share layouts, local_share (each rank's page table and store routing) and ShardedPageTables,
// with their checks.
#include <gtest/gtest.h>

#include "attnkit/context_parallel.h"

namespace attnkit {
namespace {

ShareLayout layout(ShareKind kind, int num_ranks, int pages_per_run = 1, int rank_num_pages = 16) {
  return {.kind = kind, .num_ranks = num_ranks, .pages_per_run = pages_per_run, .rank_num_pages = rank_num_pages};
}

TEST(ShareLayout, OwnersByPagePlace) {
  const ShareLayout inter = layout(ShareKind::interleaved, 3);
  const ShareLayout runs = layout(ShareKind::contiguous, 3, 2);
  const std::vector<int> want_inter = {0, 1, 2, 0, 1, 2, 0};
  const std::vector<int> want_runs = {0, 0, 1, 1, 2, 2, 0};
  for (int j = 0; j < 7; ++j) {
    EXPECT_EQ(inter.owner(j), want_inter[static_cast<size_t>(j)]) << j;
    EXPECT_EQ(runs.owner(j), want_runs[static_cast<size_t>(j)]) << j;
  }
  EXPECT_EQ(inter.global_page(2, 5), 37);
  EXPECT_EQ(inter.rank_of_page(37), 2);
  EXPECT_EQ(inter.local_page(37), 5);
}

TEST(ShareLayout, ZeroRanksIsRefused) {
  try {
    layout(ShareKind::interleaved, 0).validate();
    FAIL() << "num_ranks 0 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "context parallel: num_ranks must be >= 1, got 0");
  }
  try {
    layout(ShareKind::contiguous, 2, 0).validate();
    FAIL() << "pages_per_run 0 was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "context parallel: a contiguous layout's pages_per_run must be >= 1, got 0");
  }
  try {
    InProcessGroup group(0);
    FAIL() << "a group of 0 ranks was made";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "in-process group: size (the number of ranks) must be >= 1, got 0");
  }
}

struct Tables {
  explicit Tables(const ShareLayout& l) : a(l.num_ranks, PageAllocator(l.rank_num_pages)) {
    std::vector<PageAllocator*> ptrs;
    for (auto& x : a) ptrs.push_back(&x);
    tables = std::make_unique<ShardedPageTables>(ptrs, l, 4);
  }
  std::vector<PageAllocator> a;
  std::unique_ptr<ShardedPageTables> tables;
};

TEST(LocalShare, SplitsPagesAndRoutesTheNewToken) {
  const ShareLayout l = layout(ShareKind::interleaved, 3);
  Tables t(l);
  // 10 tokens on page size 4: pages 0, 1, 2 (2 tokens) on ranks 0, 1, 2; the new token (position 9)
  // is on page 2, rank 2. 3 tokens: one page, on rank 0.
  const ForwardBatch g = t.tables->build_batch({{.id = -1, .prefix_len = 9, .num_new_tokens = 1, .custom_mask = {}},
                                                {.id = -1, .prefix_len = 2, .num_new_tokens = 1, .custom_mask = {}}});
  const LocalShare s0 = local_share(g, l, 0), s1 = local_share(g, l, 1), s2 = local_share(g, l, 2);
  EXPECT_EQ(s0.request_idx, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s0.batch.kv_len(0), 4);
  EXPECT_EQ(s0.batch.kv_len(1), 3);
  EXPECT_EQ(s0.store.token_idx, (std::vector<int32_t>{1}));
  EXPECT_EQ(s1.request_idx, (std::vector<int32_t>{0}));
  EXPECT_EQ(s1.batch.kv_len(0), 4);
  EXPECT_TRUE(s1.store.token_idx.empty());
  EXPECT_EQ(s2.batch.kv_len(0), 2);
  EXPECT_EQ(s2.store.token_idx, (std::vector<int32_t>{0}));
  EXPECT_EQ(s2.store.slots[0], int64_t{l.local_page(g.kv_page_indices[2])} * 4 + 1);
  // Each rank's page ids are its own cache's.
  for (const LocalShare* s : {&s0, &s1, &s2}) {
    KvCacheConfig own;
    own.page_size = 4;
    own.num_pages = l.rank_num_pages;
    s->batch.validate(own);
  }
}

TEST(LocalShare, PageOnTheWrongRankIsRefused) {
  const ShareLayout l = layout(ShareKind::contiguous, 2, 2);
  Tables t(l);
  ForwardBatch g = t.tables->build_batch({{.id = -1, .prefix_len = 20, .num_new_tokens = 1, .custom_mask = {}}});
  // Page 1 of the request belongs to rank 0 (the first run); give it a page of rank 1.
  g.kv_page_indices[1] = l.global_page(1, 9);
  try {
    local_share(g, l, 0);
    FAIL() << "a page on the wrong rank was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "context parallel: kv_page_indices[1] (request 0's page 1) is 25, a page of rank 1, but "
                 "the share layout puts that page on rank 0");
  }
  g.kv_page_indices[1] = 2 * 16;  // past every rank's pages
  try {
    local_share(g, l, 0);
    FAIL() << "a page past the last rank was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "batch: kv_page_indices[1] must be in 0..31, got 32");
  }
}

TEST(LocalShare, TakesDecodeBatchesOnly) {
  const ShareLayout l = layout(ShareKind::interleaved, 2);
  Tables t(l);
  const ForwardBatch g = t.tables->build_batch({{.id = -1, .prefix_len = 0, .num_new_tokens = 5, .custom_mask = {}}});
  try {
    local_share(g, l, 0);
    FAIL() << "an extend batch was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "context parallel: local_share takes a decode batch, got mode extend");
  }
}

TEST(ShardedPageTables, AllOrNothingOverTheRanks) {
  const ShareLayout l = layout(ShareKind::interleaved, 2, 1, 2);
  Tables t(l);
  // 5 pages: ranks 0 and 1 would need 3 and 2 of their 2 each.
  try {
    t.tables->build_batch({{.id = -1, .prefix_len = 16, .num_new_tokens = 1, .custom_mask = {}}});
    FAIL() << "a batch needing more pages than rank 0 has was accepted";
  } catch (const OutOfPagesError& e) {
    EXPECT_STREQ(e.what(), "context parallel: rank 0's KV cache is out of pages: the batch needs 3, 2 of 2 free");
  }
  EXPECT_EQ(t.a[0].num_free(), 2);
  EXPECT_EQ(t.a[1].num_free(), 2);
  // A request that grows keeps its pages on their ranks.
  const ForwardBatch g = t.tables->build_batch({{.id = -1, .prefix_len = 3, .num_new_tokens = 1, .custom_mask = {}}});
  const ForwardBatch g2 =
      t.tables->build_batch({{.id = g.request_ids[0], .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}}});
  EXPECT_EQ(g2.kv_page_indices[0], g.kv_page_indices[0]);
  EXPECT_EQ(l.rank_of_page(g2.kv_page_indices[1]), 1);
  t.tables->free_request(g.request_ids[0]);
  EXPECT_EQ(t.a[0].num_free(), 2);
  EXPECT_EQ(t.a[1].num_free(), 2);
}

}  // namespace
}  // namespace attnkit
