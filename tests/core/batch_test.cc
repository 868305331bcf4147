// build_batch's CSR arrays, and ForwardBatch::validate's messages.
#include <gtest/gtest.h>

#include <functional>

#include "attnkit/batch.h"

namespace attnkit {
namespace {

KvCacheConfig config(int pages, int page_size) {
  KvCacheConfig c;
  c.num_pages = pages;
  c.page_size = page_size;
  c.num_kv_heads = 1;
  c.head_dim_k = 4;
  c.head_dim_v = 4;
  c.dtype = DType::f32;
  return c;
}

TEST(BuildBatch, FillsEveryField) {
  KvCache cache(config(16, 4));
  ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 5, .num_new_tokens = 3, .custom_mask = {}},
                                       {.id = -1, .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}}});
  EXPECT_EQ(b.mode, ForwardMode::mixed);
  EXPECT_EQ(b.qo_indptr, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b.kv_page_indptr, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(b.kv_last_page_len, (std::vector<int32_t>{4, 1}));
  EXPECT_EQ(b.prefix_lens, (std::vector<int32_t>{5, 0}));
  EXPECT_EQ(b.kv_len(0), 8);
  EXPECT_EQ(b.kv_len(1), 1);
  ASSERT_EQ(b.out_cache_loc.size(), 4u);
  EXPECT_EQ(b.out_cache_loc[0], b.slot(0, 5));
  EXPECT_EQ(b.out_cache_loc[3], b.slot(1, 0));
  EXPECT_NO_THROW(b.validate(cache.config()));
}

TEST(BuildBatch, DecodeStepsGrowExistingRequests) {
  KvCache cache(config(16, 4));
  ForwardBatch prefill = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 4, .custom_mask = {}}});
  EXPECT_EQ(prefill.mode, ForwardMode::extend);
  const RequestId id = prefill.request_ids[0];
  ForwardBatch decode = build_batch(cache, {{.id = id, .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}}});
  EXPECT_EQ(decode.mode, ForwardMode::decode);
  EXPECT_EQ(decode.prefix_lens[0], 4);
  EXPECT_EQ(decode.kv_len(0), 5);
  EXPECT_EQ(decode.num_pages(0), 2);
  EXPECT_EQ(decode.kv_last_page_len[0], 1);
}

TEST(BuildBatch, RunningOutAllocatesNothing) {
  KvCache cache(config(3, 4));
  EXPECT_THROW(build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 8, .custom_mask = {}},
                                   {.id = -1, .prefix_len = 0, .num_new_tokens = 8, .custom_mask = {}}}),
               OutOfPagesError);
  EXPECT_EQ(cache.allocator().num_free(), 3);
  EXPECT_EQ(cache.num_requests(), 0u);
}

TEST(BuildBatch, KvLenZero) {
  KvCache cache(config(4, 4));
  ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 0, .custom_mask = {}}});
  EXPECT_EQ(b.kv_len(0), 0);
  EXPECT_EQ(b.num_tokens(), 0);
  EXPECT_NO_THROW(b.validate(cache.config()));
}

TEST(BuildBatch, CustomMaskSizeIsChecked) {
  KvCache cache(config(4, 4));
  try {
    build_batch(cache, {{.id = -1, .prefix_len = 1, .num_new_tokens = 2, .custom_mask = {1, 1, 1}}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "build_batch: steps[0].custom_mask must have num_new_tokens * (prefix + num_new_tokens) = 6 entries, got 3");
  }
}

class ValidateTest : public ::testing::Test {
 protected:
  KvCache cache{config(8, 4)};
  ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 2, .num_new_tokens = 3, .custom_mask = {}}});
  void expect_error(const char* message) {
    try {
      b.validate(cache.config());
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), message);
    }
  }
};

TEST_F(ValidateTest, PageIndexOutOfRange) {
  b.kv_page_indices[1] = 8;
  expect_error("batch: kv_page_indices[1] must be in 0..7, got 8");
}

TEST_F(ValidateTest, NegativePageIndex) {
  b.kv_page_indices.back() = -1;
  expect_error(("batch: kv_page_indices[" + std::to_string(b.kv_page_indices.size() - 1) + "] must be in 0..7, got -1").c_str());
}

// The copy that checks the page table in passing (for backends that upload it) copies every entry
// and names the first one out of range as validate() does; validation without the range check
// passes a batch whose only fault is an entry no new token's slot comes from.
TEST(ValidateBatch, CopyPageIndicesChecksTheRange) {
  KvCache cache(config(8, 4));
  ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 8, .num_new_tokens = 1, .custom_mask = {}}});
  ASSERT_EQ(b.kv_page_indices.size(), 3u);
  std::vector<int32_t> copy(b.kv_page_indices.size(), -7);
  b.copy_page_indices(copy.data(), cache.config().num_pages);
  EXPECT_EQ(copy, b.kv_page_indices);
  b.kv_page_indices[0] = 8;
  b.kv_page_indices[1] = -1;
  EXPECT_NO_THROW(b.validate_except_page_range(cache.config()));
  for (auto check : {std::function<void()>([&] { b.copy_page_indices(copy.data(), cache.config().num_pages); }),
                     std::function<void()>([&] { b.validate(cache.config()); })}) {
    try {
      check();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "batch: kv_page_indices[0] must be in 0..7, got 8");
    }
  }
}

TEST_F(ValidateTest, LengthsDisagreeWithPageTable) {
  b.prefix_lens[0] = 3;
  expect_error("batch: request 0 has kv_len 5 from its page table, but prefix_lens + qo_len = 3 + 3");
}

TEST_F(ValidateTest, OutCacheLocOutsideThePageTable) {
  b.out_cache_loc[0] += 1;
  expect_error("batch: out_cache_loc[0] must be 2 (the page table's slot for request 0 position 2), got 3");
}

TEST_F(ValidateTest, LastPageLen) {
  b.kv_last_page_len[0] = 0;
  expect_error("batch: kv_last_page_len[0] must be in 1..4, got 0");
}

TEST_F(ValidateTest, IndptrDecreasing) {
  b.qo_indptr = {0, 3};
  b.kv_page_indptr = {0, 3};
  expect_error("batch: kv_page_indices must have kv_page_indptr.back() (3) entries, got 2");
}

TEST_F(ValidateTest, DecodeNeedsOneToken) {
  b.mode = ForwardMode::decode;
  expect_error("batch: a decode batch has one new token per request, but request 0 has 3");
}

TEST_F(ValidateTest, PageSizeMismatch) {
  b.page_size = 8;
  expect_error("batch: page_size must match the cache's (4), got 8");
}

// A batch of one new token a request takes a branch-free check first; every fault it finds must
// still be named as the full check names it, and one it passes must pass the full check.
TEST(ValidateBatch, OneTokenEachFaultsAreNamed) {
  KvCache cache(config(32, 4));
  const ForwardBatch good = build_batch(cache, {{.id = -1, .prefix_len = 5, .num_new_tokens = 1, .custom_mask = {}},
                                                {.id = -1, .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}},
                                                {.id = -1, .prefix_len = 11, .num_new_tokens = 1, .custom_mask = {}}});
  EXPECT_NO_THROW(good.validate(cache.config()));
  auto expect = [&](const std::function<void(ForwardBatch&)>& spoil, const std::string& message) {
    ForwardBatch b = good;
    spoil(b);
    try {
      b.validate(cache.config());
      ADD_FAILURE() << "no error, expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(e.what(), message);
    }
  };
  expect([](ForwardBatch& b) { b.out_cache_loc[2] += 1; },
         "batch: out_cache_loc[2] must be " + std::to_string(good.out_cache_loc[2]) +
             " (the page table's slot for request 2 position 11), got " + std::to_string(good.out_cache_loc[2] + 1));
  expect([](ForwardBatch& b) { b.kv_last_page_len[1] = 5; }, "batch: kv_last_page_len[1] must be in 1..4, got 5");
  expect([](ForwardBatch& b) { b.prefix_lens[0] = -1; }, "batch: prefix_lens[0] must be >= 0, got -1");
  expect([](ForwardBatch& b) { b.prefix_lens[2] = 10; },
         "batch: request 2 has kv_len 12 from its page table, but prefix_lens + qo_len = 10 + 1");
  expect([](ForwardBatch& b) { std::swap(b.kv_page_indptr[1], b.kv_page_indptr[2]); },
         "batch: kv_page_indptr must not decrease, but kv_page_indptr[2] = 2 < kv_page_indptr[1] = 3");
  expect([](ForwardBatch& b) { b.kv_page_indices[4] = 40; }, "batch: kv_page_indices[4] must be in 0..31, got 40");
}

}  // namespace
}  // namespace attnkit
