// The `planned` extend kernel tests' shared setup (prefill_testing.h).
#include "backends/planned/prefill_testing.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "harness/check.h"
#include "harness/device_copy.h"

namespace attnkit::planned::prefill_testing {

void make_setup(const PrefillCase& c, uint64_t seed, LaunchInputs& s) {
  s.spec = AttentionSpec::dense(c.num_qo_heads, c.num_kv_heads, c.head_dim);
  s.cfg = KvCacheConfig::for_spec(s.spec);
  s.cfg.page_size = c.page_size;
  s.cfg.dtype = c.kv_dtype;
  s.cfg.k_scale = c.k_scale;
  s.cfg.v_scale = c.v_scale;
  s.cfg.device = Device::cuda;
  int pages = 4;
  for (auto [prefix, n] : c.requests) pages += (prefix + n + c.page_size - 1) / c.page_size;
  s.cfg.num_pages = pages;
  s.cache = std::make_unique<KvCache>(s.cfg);
  s.cache->allocator().shuffle(seed);

  std::mt19937_64 rng(seed);
  std::vector<RequestStep> steps;
  for (auto [prefix, n] : c.requests) {
    RequestStep step;
    step.prefix_len = prefix;
    step.num_new_tokens = n;
    if (c.custom_mask && n > 0) {
      step.custom_mask.resize(static_cast<size_t>(n) * (prefix + n));
      for (auto& m : step.custom_mask) m = (rng() % 10) < 7;
    }
    steps.push_back(std::move(step));
  }
  s.batch = build_batch(*s.cache, steps);

  s.spec.causal = c.causal;
  s.spec.window_left = c.window_left;
  s.spec.logits_soft_cap = c.soft_cap;
  if (c.sinks) {
    std::uniform_real_distribution<float> u(-1.0f, 2.0f);
    for (int h = 0; h < c.num_qo_heads; ++h) s.spec.sinks.push_back(u(rng));
  }

  // Every slot random, prefix included: the kernel reads the pools only.
  const int64_t slots = s.cfg.num_slots();
  const size_t pool_bytes = static_cast<size_t>(slots) * c.num_kv_heads * c.head_dim * dtype_size(c.kv_dtype);
  s.k_host.resize(pool_bytes);
  s.v_host.resize(pool_bytes);
  harness::fill_uniform(TensorView(s.k_host.data(), c.kv_dtype, Device::cpu, {slots, c.num_kv_heads, c.head_dim}),
                        seed + 1, -1.0f, 1.0f);
  harness::fill_uniform(TensorView(s.v_host.data(), c.kv_dtype, Device::cpu, {slots, c.num_kv_heads, c.head_dim}),
                        seed + 2, -1.0f, 1.0f);
  cuda::copy_host_to_device(s.cache->k_pool(0), s.k_host.data(), pool_bytes);
  cuda::copy_host_to_device(s.cache->v_pool(0), s.v_host.data(), pool_bytes);
  const int64_t tokens = s.batch.num_tokens();
  s.q_host.resize(static_cast<size_t>(tokens) * c.num_qo_heads * c.head_dim * dtype_size(c.q_dtype));
  // Wide enough that the softmax is far from uniform (logits of a few units).
  harness::fill_uniform(TensorView(s.q_host.data(), c.q_dtype, Device::cpu, {std::max<int64_t>(tokens, 1), c.num_qo_heads, c.head_dim}),
                        seed + 3, -4.0f, 4.0f);
  s.q = upload(s.q_host);

  s.qo_indptr = upload(s.batch.qo_indptr);
  s.kv_page_indptr = upload(s.batch.kv_page_indptr);
  s.kv_page_indices = upload(s.batch.kv_page_indices);
  s.kv_last_page_len = upload(s.batch.kv_last_page_len);
  s.prefix_lens = upload(s.batch.prefix_lens);
  PrefillParams& p = s.params;
  p.q = s.q.data();
  p.k_pool = s.cache->k_pool(0);
  p.v_pool = s.cache->v_pool(0);
  p.qo_indptr = static_cast<const int32_t*>(s.qo_indptr.data());
  p.kv_page_indptr = static_cast<const int32_t*>(s.kv_page_indptr.data());
  p.kv_page_indices = static_cast<const int32_t*>(s.kv_page_indices.data());
  p.page_begin = p.kv_page_indptr;  // the batch's flat table: request i's entries start at kv_page_indptr[i]
  p.kv_last_page_len = static_cast<const int32_t*>(s.kv_last_page_len.data());
  p.prefix_lens = static_cast<const int32_t*>(s.prefix_lens.data());
  if (!s.batch.custom_mask_indptr.empty()) {
    s.mask = upload(s.batch.custom_mask);
    s.mask_indptr = upload(s.batch.custom_mask_indptr);
    p.custom_mask = static_cast<const uint8_t*>(s.mask.data());
    p.custom_mask_indptr = static_cast<const int64_t*>(s.mask_indptr.data());
  }
  if (!s.spec.sinks.empty()) {
    s.sinks = upload(s.spec.sinks);
    p.sinks = static_cast<const float*>(s.sinks.data());
  }
  p.batch_size = s.batch.batch_size();
  p.num_qo_heads = c.num_qo_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim_qk = p.head_dim_vo = c.head_dim;
  p.page_size = c.page_size;
  p.sm_scale = s.spec.scale();
  p.logits_soft_cap = c.soft_cap;
  p.window_left = c.window_left;
  p.causal = c.causal;
  p.k_scale = c.k_scale;
  p.v_scale = c.v_scale;
  p.q_dtype = c.q_dtype;
  p.kv_dtype = c.kv_dtype;
}

std::vector<PrefillWorkItem> make_work(const PrefillCase& c, const LaunchInputs& s, std::vector<int>& split_base,
                                       int& num_partial_rows) {
  std::vector<PrefillWorkItem> work = make_prefill_work(s.batch, c.num_qo_heads, c.num_kv_heads, c.head_dim);
  num_partial_rows = 0;
  if (c.kv_splits <= 1) return work;
  const ForwardBatch& b = s.batch;
  split_base.assign(static_cast<size_t>(b.batch_size()), 0);
  for (int i = 0; i < b.batch_size(); ++i) {
    split_base[static_cast<size_t>(i)] = num_partial_rows;
    num_partial_rows += c.kv_splits * b.qo_len(i);
  }
  const int tile_kv = prefill_tile_kv(c.head_dim);
  std::vector<PrefillWorkItem> split;
  for (const PrefillWorkItem& w : work) {
    const int kv_len = b.kv_len(w.request_idx);
    const int chunk = std::max(tile_kv, (kv_len + c.kv_splits - 1) / c.kv_splits / tile_kv * tile_kv);
    for (int k = 0; k < c.kv_splits; ++k) {
      PrefillWorkItem item = w;
      item.kv_begin = std::min(kv_len, k * chunk);
      item.kv_end = k + 1 == c.kv_splits ? -1 : std::min(kv_len, (k + 1) * chunk);
      item.partial_row = split_base[static_cast<size_t>(w.request_idx)] + k * b.qo_len(w.request_idx);
      split.push_back(item);
    }
  }
  return split;
}

}  // namespace attnkit::planned::prefill_testing
