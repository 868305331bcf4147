#include "backends/planned/timeline.h"

#include <cstdlib>
#include <fstream>

#include "attnkit/error.h"
#include "cuda/check.h"

namespace attnkit::planned {

std::unique_ptr<DecodeTimeline> DecodeTimeline::from_environment(int num_ctas) {
  const char* path = std::getenv("ATTNKIT_DECODE_TIMELINE");
  if (path == nullptr || *path == '\0') return nullptr;
  return std::unique_ptr<DecodeTimeline>(new DecodeTimeline(path, num_ctas));
}

DecodeTimeline::DecodeTimeline(std::string path, int num_ctas)
    : path_(std::move(path)),
      num_ctas_(num_ctas),
      records_(Device::cuda, static_cast<size_t>(num_ctas) * kTimelineSlots * sizeof(unsigned long long)) {}

void DecodeTimeline::set_plan(int variant, std::span<const int32_t> cta_item_indptr,
                              std::span<const DecodeWorkItem> items, int head_reps) {
  if (variants_.size() <= static_cast<size_t>(variant)) variants_.resize(static_cast<size_t>(variant) + 1);
  PerCta& v = variants_[static_cast<size_t>(variant)];
  v.items.assign(static_cast<size_t>(num_ctas_), 0);
  v.keys.assign(static_cast<size_t>(num_ctas_), 0);
  for (int c = 0; c < num_ctas_; ++c) {
    const size_t plan_cta = static_cast<size_t>(c / head_reps);  // the plan's CTA that CTA c runs
    const int begin = cta_item_indptr[plan_cta], end = cta_item_indptr[plan_cta + 1];
    int keys = 0;
    for (int i = begin; i < end; ++i) keys += items[static_cast<size_t>(i)].kv_end - items[static_cast<size_t>(i)].kv_begin;
    v.items[static_cast<size_t>(c)] = end - begin;
    v.keys[static_cast<size_t>(c)] = keys;
  }
}

unsigned long long* DecodeTimeline::begin(cudaStream_t stream) {
  ATTNKIT_CUDA_CHECK(cudaMemsetAsync(records_.data(), 0, records_.nbytes(), stream));
  return static_cast<unsigned long long*>(records_.data());
}

void DecodeTimeline::write_after(cudaStream_t stream, int variant) const {
  const PerCta& v = variants_.at(static_cast<size_t>(variant));
  ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<unsigned long long> r(static_cast<size_t>(num_ctas_) * kTimelineSlots);
  ATTNKIT_CUDA_CHECK(cudaMemcpy(r.data(), records_.data(), r.size() * sizeof(r[0]), cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < num_ctas_; ++c) t0 = std::min(t0, r[static_cast<size_t>(c) * kTimelineSlots + 1]);
  std::ofstream f(path_);
  ATTNKIT_CHECK(f.good(), "ATTNKIT_DECODE_TIMELINE: cannot write ", path_);
  f << "cta,sm,items,keys,entry_ns,first_tile_ns,last_tile_ns,exit_ns,join_ns,join_loads_ns\n";
  for (int c = 0; c < num_ctas_; ++c) {
    const unsigned long long* x = r.data() + static_cast<size_t>(c) * kTimelineSlots;
    // A CTA without items records no tiles: its tile times are its exit.
    const unsigned long long first = v.items[static_cast<size_t>(c)] > 0 ? x[2] : x[4];
    const unsigned long long last = v.items[static_cast<size_t>(c)] > 0 ? x[3] : x[4];
    f << c << ',' << x[0] << ',' << v.items[static_cast<size_t>(c)] << ',' << v.keys[static_cast<size_t>(c)] << ','
      << x[1] - t0 << ',' << first - t0 << ',' << last - t0 << ',' << x[4] - t0 << ','
      << (x[6] > x[5] ? x[6] - x[5] : 0) << ',' << (x[7] > x[5] && x[6] > x[7] ? x[6] - x[7] : 0) << '\n';
  }
}

}  // namespace attnkit::planned
