// The `planned` decode kernel's per-CTA timeline (BackendOptions::decode_timeline), for looking at
// where one shape's time goes: the records live on the device while the backend runs, and are
// written as CSV afterwards (scripts/decode-timeline.py reads it).
#pragma once

#include <string>

#include "attnkit/backend.h"
#include "attnkit/tensor.h"

namespace attnkit::harness {

class DecodeTimeline {
 public:
  DecodeTimeline();
  // What BackendOptions::decode_timeline takes; zeroed here.
  unsigned long long* records();
  // Writes the records of the last decode launch (after the backend's work is done): one line a CTA
  // that ran, times in ns from the first CTA's entry. Throws attnkit::Error naming `path` if it cannot.
  void write_csv(const std::string& path) const;

 private:
  Buffer records_;  // [kDecodeTimelineCtas, kDecodeTimelineSlots] u64
};

}  // namespace attnkit::harness
