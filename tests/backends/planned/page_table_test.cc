// The `planned` page table's slots (host only): every request's entries where page_begin says,
// slots line-aligned and disjoint, within the buffer, and a next decode step rewriting few lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "backends/planned/page_table.h"

namespace attnkit::planned {
namespace {

constexpr int kPage = 16;
constexpr int kPoolPages = 1 << 20;

// A decode batch of the given history lengths whose page entries are drawn from `rng`, keeping
// request i's first pages from `prev` (the step before) where it has them.
ForwardBatch decode_batch(const std::vector<int>& kv_lens, std::mt19937& rng, const ForwardBatch* prev = nullptr) {
  std::uniform_int_distribution<int> page(0, kPoolPages - 1);
  ForwardBatch b;
  b.mode = ForwardMode::decode;
  b.page_size = kPage;
  b.qo_indptr.push_back(0);
  b.kv_page_indptr.push_back(0);
  for (size_t i = 0; i < kv_lens.size(); ++i) {
    const int pages = (kv_lens[i] + kPage - 1) / kPage;
    for (int p = 0; p < pages; ++p) {
      const bool kept = prev != nullptr && i < static_cast<size_t>(prev->batch_size()) && p < prev->num_pages(static_cast<int>(i));
      b.kv_page_indices.push_back(kept ? prev->kv_page_indices[static_cast<size_t>(prev->kv_page_indptr[i] + p)] : page(rng));
    }
    b.qo_indptr.push_back(static_cast<int32_t>(i) + 1);
    b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
    b.kv_last_page_len.push_back((kv_lens[i] - 1) % kPage + 1);
    b.prefix_lens.push_back(kv_lens[i] - 1);
    b.out_cache_loc.push_back(0);
  }
  return b;
}

// The slots as the kernels read them: request i's entries at page_begin[i], line-aligned, disjoint.
void expect_table(const ForwardBatch& b, const std::vector<int32_t>& page_begin, const std::vector<int32_t>& table,
                  size_t end) {
  ASSERT_LE(end, table.size());
  std::vector<std::pair<int32_t, int32_t>> ranges;
  for (int i = 0; i < b.batch_size(); ++i) {
    const int32_t begin = page_begin[static_cast<size_t>(i)];
    ASSERT_EQ(begin % 16, 0) << "request " << i;
    ASSERT_LE(static_cast<size_t>(begin + b.num_pages(i)), end) << "request " << i;
    for (int p = 0; p < b.num_pages(i); ++p) {
      ASSERT_EQ(table[static_cast<size_t>(begin + p)], b.kv_page_indices[static_cast<size_t>(b.kv_page_indptr[i] + p)])
          << "request " << i << " page " << p;
    }
    if (b.num_pages(i) > 0) ranges.push_back({begin, begin + b.num_pages(i)});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) ASSERT_LE(ranges[k - 1].second, ranges[k].first) << "slots overlap";
}

size_t lines_differing(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); i += 16) n += !std::equal(a.begin() + static_cast<std::ptrdiff_t>(i),
                                                             a.begin() + static_cast<std::ptrdiff_t>(std::min(i + 16, a.size())),
                                                             b.begin() + static_cast<std::ptrdiff_t>(i));
  return n;
}

// Decode steps of a changing batch written into two tables in turn (the arena's staging buffers):
// requests grow, finish and join, and each step's table is what the kernels must read.
TEST(PlannedPageTable, StepsOfAChangingBatchReadBack) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> len(1, 3000);
  std::vector<int> kv_lens(200);
  for (int& n : kv_lens) n = len(rng);
  PlanCapacity cap;
  cap.batch_size = 256;
  cap.num_pages = 256 * 3000 / kPage;
  PageTableSlots slots;
  std::vector<int32_t> tables[2] = {std::vector<int32_t>(page_table_entries(cap), -1),
                                    std::vector<int32_t>(page_table_entries(cap), -1)};
  std::vector<int32_t> page_begin(static_cast<size_t>(cap.batch_size));
  ForwardBatch prev = decode_batch(kv_lens, rng);
  for (int step = 0; step < 300; ++step) {
    SCOPED_TRACE(step);
    if (step % 25 == 24) kv_lens.erase(kv_lens.begin() + step % static_cast<int>(kv_lens.size()));  // one finishes
    if (step % 40 == 39 && kv_lens.size() < 256) kv_lens.push_back(len(rng));                     // one joins
    for (int& n : kv_lens) ++n;
    const ForwardBatch b = decode_batch(kv_lens, rng, &prev);
    std::vector<int32_t>& table = tables[step % 2];
    const std::vector<int32_t> before = table;
    const size_t end = slots.write(b, kPoolPages, table.size(), page_begin.data(), table.data());
    expect_table(b, page_begin, table, end);
    // Without a request leaving, two steps change the lines of the requests that gained a page
    // (each history grows by a page every 16 steps) and of the few that moved to a new slot.
    const bool changed_lately = step % 25 == 24 || step % 25 == 0 || step % 40 == 39 || step % 40 == 0;
    if (step >= 2 && !changed_lately) {
      EXPECT_LE(lines_differing(before, table), kv_lens.size() / 2) << "of " << end / 16 << " lines in use";
    }
    prev = b;
  }
}

// A buffer too small for roomy slots takes slots of whole lines, placed anew; the reads still match.
TEST(PlannedPageTable, TightBufferPlacesSlotsAnew) {
  std::mt19937 rng(3);
  PlanCapacity cap;
  cap.batch_size = 4;
  cap.num_pages = 40;
  std::vector<int32_t> table(40 + 4 * 15, -1), page_begin(4);
  PageTableSlots slots;
  std::vector<int> kv_lens = {100, 3, 160, 330};  // 7 + 1 + 10 + 21 = 39 pages
  const ForwardBatch b = decode_batch(kv_lens, rng);
  const size_t end = slots.write(b, kPoolPages, table.size(), page_begin.data(), table.data());
  expect_table(b, page_begin, table, end);
  EXPECT_LE(end, table.size());
  EXPECT_GE(page_table_entries(cap), 40u + 4 * 15) << "a tight placement of any batch within the capacity fits";
}

TEST(PlannedPageTable, OutOfRangeEntryIsNamed) {
  std::mt19937 rng(5);
  ForwardBatch b = decode_batch({40, 40, 40}, rng);
  for (int32_t& p : b.kv_page_indices) p %= 100;
  b.kv_page_indices[4] = 100;
  b.kv_page_indices[7] = -2;
  std::vector<int32_t> table(1024), page_begin(3);
  PageTableSlots slots;
  try {
    slots.write(b, 100, table.size(), page_begin.data(), table.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "batch: kv_page_indices[4] must be in 0..99, got 100");
  }
}

// Entries that the write checks four lines at a time (a long request) are checked as well, below
// zero as above the pool.
TEST(PlannedPageTable, OutOfRangeEntryOfALongRequestIsNamed) {
  for (const int32_t bad : {-1, 100, INT32_MIN, INT32_MAX}) {
    std::mt19937 rng(6);
    ForwardBatch b = decode_batch({40, 2000, 40}, rng);  // 3, 125, 3 pages
    for (int32_t& p : b.kv_page_indices) p %= 100;
    b.kv_page_indices[3 + 70] = bad;
    std::vector<int32_t> table(1024), page_begin(3);
    PageTableSlots slots;
    try {
      slots.write(b, 100, table.size(), page_begin.data(), table.data());
      FAIL() << "expected an error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "batch: kv_page_indices[73] must be in 0..99, got " + std::to_string(bad));
    }
  }
}

}  // namespace
}  // namespace attnkit::planned
