// A decode batch for the host-cost benchmarks: one new token a request over contiguous pages,
// histories of the given lengths, page table and out_cache_loc filled as build_batch would.
#pragma once

#include <cstdint>
#include <vector>

#include "attnkit/batch.h"

namespace attnkit::bench {

inline ForwardBatch decode_batch(const std::vector<int>& kv_lens, int page_size) {
  ForwardBatch b;
  b.mode = ForwardMode::decode;
  b.page_size = page_size;
  b.qo_indptr.push_back(0);
  b.kv_page_indptr.push_back(0);
  int next_page = 0;
  for (size_t i = 0; i < kv_lens.size(); ++i) {
    const int kv_len = kv_lens[i];
    const int pages = (kv_len + page_size - 1) / page_size;
    for (int p = 0; p < pages; ++p) b.kv_page_indices.push_back(next_page++);
    b.qo_indptr.push_back(static_cast<int32_t>(i + 1));
    b.kv_page_indptr.push_back(static_cast<int32_t>(b.kv_page_indices.size()));
    b.kv_last_page_len.push_back((kv_len - 1) % page_size + 1);
    b.prefix_lens.push_back(kv_len - 1);
    b.out_cache_loc.push_back(int64_t{next_page - 1} * page_size + (kv_len - 1) % page_size);
  }
  return b;
}

}  // namespace attnkit::bench
