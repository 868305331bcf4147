// PageTableSlots: where each request's page-table entries lie in the upload buffer, and the write of
// the lines that changed (Highway SIMD, dispatched at run time).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backends/planned/page_table.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::planned::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Writes each request's entries, entries[indptr[i], indptr[i + 1]), into table[begin[i], ...) where
// they differ, a vector at a time, and returns true when some entry is outside [0, limit). A line
// that holds the same entries is only read: its cache line stays shared with the upload's last read
// of it, which a write would have to take back (on the Xeon hosts, twice the cost of writing a line
// the core holds). A request's last vector is padded with zeros: its slot is whole lines, so the
// padding stays inside it, and the next plan finds the same zeros there.
bool write_changed(const int32_t* HWY_RESTRICT entries, size_t num_entries, const int32_t* HWY_RESTRICT indptr,
                   const int32_t* HWY_RESTRICT begin, int n, int32_t limit, int32_t* HWY_RESTRICT table) {
  const hn::CappedTag<int32_t, 16> d;  // a vector is a line or a whole part of one
  const hn::RebindToUnsigned<decltype(d)> du;
  const size_t lanes = hn::Lanes(d);
  // Unsigned, a negative entry is larger than any limit: one maximum checks both ends of the range.
  auto hi = hn::Zero(du);
  // Stores x where the table holds something else (rarely: the lines of a grown request).
  auto put = [&](hn::Vec<decltype(d)> x, int32_t* dst) {
    if (!hn::AllTrue(d, hn::Eq(x, hn::LoadU(d, dst)))) hn::StoreU(x, d, dst);
  };
  HWY_ALIGN int32_t last[16];
  for (int r = 0; r < n; ++r) {
    const size_t from = static_cast<size_t>(indptr[r]), count = static_cast<size_t>(indptr[r + 1]) - from;
    const int32_t* src = entries + from;
    int32_t* dst = table + begin[r];
    size_t i = 0;
    // Four vectors a round with one test of all four, the usual case being no change at all.
    for (; i + 4 * lanes <= count; i += 4 * lanes) {
      const auto x0 = hn::LoadU(d, src + i), x1 = hn::LoadU(d, src + i + lanes);
      const auto x2 = hn::LoadU(d, src + i + 2 * lanes), x3 = hn::LoadU(d, src + i + 3 * lanes);
      hi = hn::Max(hi, hn::Max(hn::Max(hn::BitCast(du, x0), hn::BitCast(du, x1)),
                               hn::Max(hn::BitCast(du, x2), hn::BitCast(du, x3))));
      const auto same = hn::And(hn::And(hn::Eq(x0, hn::LoadU(d, dst + i)), hn::Eq(x1, hn::LoadU(d, dst + i + lanes))),
                                hn::And(hn::Eq(x2, hn::LoadU(d, dst + i + 2 * lanes)),
                                        hn::Eq(x3, hn::LoadU(d, dst + i + 3 * lanes))));
      if (!hn::AllTrue(d, same)) {
        put(x0, dst + i);
        put(x1, dst + i + lanes);
        put(x2, dst + i + 2 * lanes);
        put(x3, dst + i + 3 * lanes);
      }
    }
    for (; i < count; i += lanes) {
      hn::Vec<decltype(d)> x;
      if (i + lanes <= count) {
        x = hn::LoadU(d, src + i);
      } else if (from + i + lanes <= num_entries) {  // the next request's entries follow: masked off
        x = hn::IfThenElseZero(hn::FirstN(d, count - i), hn::LoadU(d, src + i));
      } else {  // the table's very end: no read past it
        for (size_t k = 0; k < lanes; ++k) last[k] = i + k < count ? src[i + k] : 0;
        x = hn::Load(d, last);
      }
      hi = hn::Max(hi, hn::BitCast(du, x));
      put(x, dst + i);
    }
  }
  return hn::GetLane(hn::MaxOfLanes(du, hi)) >= static_cast<uint32_t>(limit);
}

}  // namespace attnkit::planned::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>

#include "attnkit/error.h"
#include "backends/planned/page_table.h"

namespace attnkit::planned {

namespace {

HWY_EXPORT(write_changed);

constexpr size_t kLine = 16;  // entries in a 64-byte line

size_t whole_lines(size_t entries) { return (entries + kLine - 1) / kLine * kLine; }
// A slot with room for a line more than the request's pages: a decode request gains a page every
// page_size steps, so it moves to a new slot (and is written whole) once in 16 pages.
size_t roomy_slot(size_t pages) { return whole_lines(pages + kLine); }

}  // namespace

size_t page_table_entries(const PlanCapacity& capacity) {
  const size_t pages = static_cast<size_t>(capacity.num_pages), requests = static_cast<size_t>(capacity.batch_size);
  return pages + pages / 4 + 2 * kLine * requests;
}

void PageTableSlots::reset() {
  begin_.clear();
  size_.clear();
  end_ = 0;
}

void PageTableSlots::place_all(const ForwardBatch& batch, size_t capacity_entries) {
  const int n = batch.batch_size();
  size_t roomy = 0;
  for (int i = 0; i < n; ++i) roomy += roomy_slot(static_cast<size_t>(batch.num_pages(i)));
  const bool room = roomy <= capacity_entries;  // else slots of whole lines only (always fit)
  begin_.resize(static_cast<size_t>(n));
  size_.resize(static_cast<size_t>(n));
  end_ = 0;
  for (int i = 0; i < n; ++i) {
    const size_t pages = static_cast<size_t>(batch.num_pages(i));
    const size_t size = room ? roomy_slot(pages) : whole_lines(pages);
    begin_[static_cast<size_t>(i)] = static_cast<int32_t>(end_);
    size_[static_cast<size_t>(i)] = static_cast<int32_t>(size);
    end_ += size;
  }
  ATTNKIT_CHECK(end_ <= capacity_entries, "planned plan: the page table needs ", end_, " entries, the buffer holds ",
                capacity_entries);
}

size_t PageTableSlots::write(const ForwardBatch& batch, int num_pages, size_t capacity_entries, int32_t* page_begin,
                             int32_t* table) {
  const int n = batch.batch_size();
  if (begin_.size() < static_cast<size_t>(n)) {
    begin_.resize(static_cast<size_t>(n), 0);
    size_.resize(static_cast<size_t>(n), -1);  // no slot yet: placed below
  }
  for (int i = 0; i < n; ++i) {
    const size_t pages = static_cast<size_t>(batch.num_pages(i));
    if (static_cast<int64_t>(pages) <= size_[static_cast<size_t>(i)]) continue;
    const size_t size = roomy_slot(pages);
    if (end_ + size > capacity_entries) {  // the buffer's end is reached: every slot placed anew
      place_all(batch, capacity_entries);
      break;
    }
    begin_[static_cast<size_t>(i)] = static_cast<int32_t>(end_);
    size_[static_cast<size_t>(i)] = static_cast<int32_t>(size);
    end_ += size;
  }
  std::copy(begin_.begin(), begin_.begin() + n, page_begin);
  if (HWY_DYNAMIC_DISPATCH(write_changed)(batch.kv_page_indices.data(), batch.kv_page_indices.size(),
                                          batch.kv_page_indptr.data(), begin_.data(), n, num_pages, table)) {
    batch.check_page_range(num_pages);  // throws, naming the first bad entry
  }
  return end_;
}

}  // namespace attnkit::planned
#endif  // HWY_ONCE
