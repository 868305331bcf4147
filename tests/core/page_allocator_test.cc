// The page allocator: exhaustion, reuse, no page owned twice.
#include <gtest/gtest.h>

#include <set>

#include "attnkit/kv_cache.h"

namespace attnkit {
namespace {

TEST(PageAllocator, HandsOutEveryPageOnce) {
  PageAllocator a(10);
  std::vector<int32_t> first = a.allocate(4);
  std::vector<int32_t> second = a.allocate(6);
  std::set<int32_t> all(first.begin(), first.end());
  all.insert(second.begin(), second.end());
  EXPECT_EQ(all.size(), 10u);
  EXPECT_EQ(a.num_free(), 0);
}

TEST(PageAllocator, ExhaustionChangesNothing) {
  PageAllocator a(5);
  a.allocate(3);
  try {
    a.allocate(3);
    FAIL();
  } catch (const OutOfPagesError& e) {
    EXPECT_STREQ(e.what(), "KV cache out of pages: asked for 3, 2 of 5 free");
  }
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_EQ(a.allocate(2).size(), 2u);
}

TEST(PageAllocator, FreedPagesAreReused) {
  PageAllocator a(3);
  std::vector<int32_t> p = a.allocate(3);
  a.free(std::span<const int32_t>(p.data(), 1));
  EXPECT_EQ(a.num_free(), 1);
  EXPECT_FALSE(a.is_allocated(p[0]));
  EXPECT_EQ(a.allocate(1), std::vector<int32_t>{p[0]});
}

TEST(PageAllocator, DoubleFreeIsRefusedAndFreesNothing) {
  PageAllocator a(4);
  std::vector<int32_t> p = a.allocate(2);
  std::vector<int32_t> twice = {p[0], p[1], p[0]};
  EXPECT_THROW(a.free(twice), Error);
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_TRUE(a.is_allocated(p[0]));
  std::vector<int32_t> out_of_range = {7};
  try {
    a.free(out_of_range);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "free: page must be in 0..3, got 7");
  }
}

TEST(PageAllocator, ShuffleChangesOrderNotContents) {
  PageAllocator a(64);
  a.shuffle(3);
  std::vector<int32_t> p = a.allocate(64);
  EXPECT_EQ(std::set<int32_t>(p.begin(), p.end()).size(), 64u);
  bool sorted = std::is_sorted(p.begin(), p.end());
  EXPECT_FALSE(sorted);
}

}  // namespace
}  // namespace attnkit
