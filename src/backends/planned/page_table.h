// The page table as the `planned` kernels read it: request i's entries lie at
// [page_begin[i], page_begin[i] + pages of i) of the upload buffer's page-table section, in a slot of
// whole 64-byte lines that stays where it is from one plan to the next while the request at batch
// index i fits in it. A plan writes only the lines that differ from what the staging buffer holds,
// so the next decode step (a few requests a new page each) rewrites a few lines, not the table.
//
// Why: the upload's reads of a staging buffer take its lines out of the writing core's cache, and
// on the H200 machines' hosts (Intel Xeon) writing a whole 32k-entry table after its upload cost
// 6.1-8.8 us against 3.4-4.1 us into cached lines; comparing it and writing nothing cost 3.5-3.9 us.
// A flat table (the batch's own layout) shifts every later request's entries when one request gains
// a page, so every line changes: slots keep each request's entries in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnkit/batch.h"
#include "backends/planned/plan.h"

namespace attnkit::planned {

// Entries the page-table section holds for `capacity`: the pages, a quarter more, and two lines a
// request (a slot's rounding up to whole lines, and room to grow). Placed anew and tightly (whole
// lines only), any batch within the capacity fits.
size_t page_table_entries(const PlanCapacity& capacity);

class PageTableSlots {
 public:
  // Places every request's slot (the last plan's where the request still fits, a new one at the
  // end where it does not, all anew when the end passes `capacity_entries`), writes the slots'
  // starts to `page_begin` [batch_size] and the entries that differ from `table`'s into `table`,
  // checking every entry against `num_pages` (a bad one throws attnkit::Error naming it, as
  // validation does). Returns the entries of `table` in use: the upload's end.
  size_t write(const ForwardBatch& batch, int num_pages, size_t capacity_entries, int32_t* page_begin, int32_t* table);
  // Forgets every slot: the table's memory is new.
  void reset();

 private:
  void place_all(const ForwardBatch& batch, size_t capacity_entries);

  std::vector<int32_t> begin_;  // [requests placed] slot start, in entries (a multiple of a line's 16)
  std::vector<int32_t> size_;   // [requests placed] slot size, in entries
  size_t end_ = 0;              // the first entry past every slot
};

}  // namespace attnkit::planned
