// What the `planned` extend kernel's tests share: a case (heads, dtypes, pages, requests, masks), the
// inputs of one launch on the device with their host copies, and the work list a case launches.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/kv_cache.h"
#include "backends/planned/kernels/prefill.h"
#include "cuda/memory.h"

namespace attnkit::planned::prefill_testing {

struct PrefillCase {
  std::string label;
  int num_qo_heads = 8;
  int num_kv_heads = 2;
  int head_dim = 128;
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
  int page_size = 16;
  std::vector<std::pair<int, int>> requests;  // (prefix_len, num_new_tokens)
  bool causal = true;
  int window_left = -1;
  float soft_cap = 0.0f;
  bool sinks = false;
  bool custom_mask = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  int kv_splits = 1;  // > 1: every q tile's KV is cut into this many items, merged on the host
};

template <typename T>
Buffer upload(const std::vector<T>& v) {
  Buffer b(Device::cuda, std::max<size_t>(1, v.size() * sizeof(T)));
  if (!v.empty()) b.copy_from_host(v.data(), v.size() * sizeof(T));
  return b;
}

// Everything one launch reads, on the device, plus the host copies the reference reads.
struct LaunchInputs {
  KvCacheConfig cfg;
  std::unique_ptr<KvCache> cache;
  ForwardBatch batch;
  AttentionSpec spec;
  std::vector<uint8_t> k_host, v_host, q_host;
  Buffer q, qo_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len, prefix_lens, mask, mask_indptr, sinks;
  PrefillParams params;
};

// Fills `s` for case `c`: the cache and batch, random q/K/V (seeded), masks and sinks, uploaded, and
// the launch's parameters.
void make_setup(const PrefillCase& c, uint64_t seed, LaunchInputs& s);

// The work list, and with kv_splits > 1 the partial-row base of every (request, split).
std::vector<PrefillWorkItem> make_work(const PrefillCase& c, const LaunchInputs& s, std::vector<int>& split_base,
                                       int& num_partial_rows);

}  // namespace attnkit::planned::prefill_testing
