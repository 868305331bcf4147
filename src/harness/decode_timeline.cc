#include "harness/decode_timeline.h"

#include <algorithm>
#include <fstream>
#include <vector>

#include "attnkit/error.h"

namespace attnkit::harness {

namespace {
constexpr size_t kRecordBytes = sizeof(unsigned long long) * kDecodeTimelineSlots;
}  // namespace

DecodeTimeline::DecodeTimeline() : records_(Device::cuda, kDecodeTimelineCtas * kRecordBytes) {}

unsigned long long* DecodeTimeline::records() {
  records_.fill_bytes(0);
  return static_cast<unsigned long long*>(records_.data());
}

void DecodeTimeline::write_csv(const std::string& path) const {
  std::vector<unsigned long long> r(static_cast<size_t>(kDecodeTimelineCtas) * kDecodeTimelineSlots);
  records_.copy_to_host(r.data(), r.size() * sizeof(r[0]));
  // Slots: SM, entry, first tile landed, last tile consumed, exit, join start, join end, join loads.
  auto at = [&](size_t cta, int slot) { return r[cta * kDecodeTimelineSlots + static_cast<size_t>(slot)]; };
  size_t ran = 0;
  unsigned long long t0 = ~0ull;
  for (size_t c = 0; c < static_cast<size_t>(kDecodeTimelineCtas); ++c) {
    if (at(c, 1) == 0) continue;  // no entry stamp: the grid has fewer CTAs
    ran = c + 1;
    t0 = std::min(t0, at(c, 1));
  }
  std::ofstream f(path);
  ATTNKIT_CHECK(f.good(), "decode timeline: cannot write ", path);
  f << "cta,sm,busy,entry_ns,first_tile_ns,last_tile_ns,exit_ns,join_ns,join_loads_ns\n";
  for (size_t c = 0; c < ran; ++c) {
    // A CTA without items records no tiles: its tile times are its exit.
    const bool busy = at(c, 2) != 0;
    const unsigned long long first = busy ? at(c, 2) : at(c, 4), last = busy ? at(c, 3) : at(c, 4);
    f << c << ',' << at(c, 0) << ',' << (busy ? 1 : 0) << ',' << at(c, 1) - t0 << ',' << first - t0 << ','
      << last - t0 << ',' << at(c, 4) - t0 << ',' << (at(c, 6) > at(c, 5) ? at(c, 6) - at(c, 5) : 0) << ','
      << (at(c, 7) > at(c, 5) && at(c, 6) > at(c, 7) ? at(c, 6) - at(c, 7) : 0) << '\n';
  }
  ATTNKIT_CHECK(f.good(), "decode timeline: cannot write ", path);
}

}  // namespace attnkit::harness
