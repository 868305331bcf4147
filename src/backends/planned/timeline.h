// Diagnostics of the decode kernel: with ATTNKIT_DECODE_TIMELINE=FILE in the environment, every
// decode launch records each CTA's SM and %globaltimer at its entry, first landed tile, last consumed
// tile and exit, and the launch's record (with each CTA's planned items and keys) replaces FILE as
// CSV. The launch then waits for the GPU, so this is for looking at one shape, never for timing
// many. Off (no environment variable): nothing is allocated and the kernel's stores are skipped.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attnkit/tensor.h"
#include "backends/planned/kernels/decode.h"

namespace attnkit::planned {

class DecodeTimeline {
 public:
  // Null unless ATTNKIT_DECODE_TIMELINE names a file.
  static std::unique_ptr<DecodeTimeline> from_environment(int num_ctas);

  // Plan variant `variant` (a window's) as planned: each CTA's items and KV positions, written beside
  // its times when a launch of that variant is. The plan covers one share of the KV heads: CTA c
  // runs its CTA c / head_reps.
  void set_plan(int variant, std::span<const int32_t> cta_item_indptr, std::span<const DecodeWorkItem> items,
                int head_reps);
  // Zeroes the records (queued on `stream`) and returns them for the launch's DecodeParams.
  unsigned long long* begin(cudaStream_t stream);
  // Waits for the launch of plan variant `variant` just queued on `stream` and writes the file.
  void write_after(cudaStream_t stream, int variant) const;

 private:
  DecodeTimeline(std::string path, int num_ctas);
  std::string path_;
  int num_ctas_;
  Buffer records_;  // [num_ctas, kTimelineSlots] u64, device
  struct PerCta {
    std::vector<int32_t> items, keys;
  };
  std::vector<PerCta> variants_;  // grown to the variants planned
};

}  // namespace attnkit::planned
