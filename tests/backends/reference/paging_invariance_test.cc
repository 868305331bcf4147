// Paging invariance: the same tokens give the same output whatever the page size and page order.
#include <gtest/gtest.h>

#include <cstring>

#include "attnkit/registry.h"
#include "harness/device_copy.h"

namespace attnkit {
namespace {

std::vector<float> run_with_pages(int page_size, uint64_t shuffle_seed) {
  const ModelSpec model = make_preset("qwen3-0.6b", 1);
  const AttentionSpec& s = model.layer(0);
  KvCacheConfig c = KvCacheConfig::for_spec(s);
  c.num_pages = 64 * 4 / page_size + 8;
  c.page_size = page_size;
  c.dtype = DType::bf16;
  KvCache cache(c);
  if (shuffle_seed) cache.allocator().shuffle(shuffle_seed);
  // Three requests: prefix 0/37/50 with 9/1/14 new tokens; all K/V drawn by position.
  const std::vector<std::pair<int64_t, int64_t>> lens = {{0, 9}, {37, 1}, {50, 14}};
  std::vector<RequestStep> steps;
  for (auto [p, n] : lens) steps.push_back({.id = -1, .prefix_len = p, .num_new_tokens = n, .custom_mask = {}});
  ForwardBatch b = build_batch(cache, steps);
  const int64_t row = int64_t{s.num_kv_heads} * s.head_dim_qk;
  for (int i = 0; i < b.batch_size(); ++i) {
    if (b.prefix_lens[i] == 0) continue;
    const int64_t p = b.prefix_lens[i];
    harness::Staged kv(Device::cpu, DType::f32, {p, s.num_kv_heads, s.head_dim_qk});
    harness::fill_uniform(kv.host(), 100 + static_cast<uint64_t>(i), -1, 1);
    std::vector<int64_t> loc;
    for (int64_t t = 0; t < p; ++t) loc.push_back(b.slot(i, t));
    cache.store(0, kv.host(), kv.host(), TensorView(loc.data(), DType::i64, Device::cpu, {p}));
  }
  (void)row;
  const int64_t n = b.num_tokens();
  harness::Staged q(Device::cpu, DType::bf16, {n, s.num_qo_heads, s.head_dim_qk});
  harness::Staged k(Device::cpu, DType::bf16, {n, s.num_kv_heads, s.head_dim_qk});
  harness::Staged out(Device::cpu, DType::f32, {n, s.num_qo_heads, s.head_dim_qk});
  harness::fill_uniform(q.host(), 1, -2, 2);
  harness::fill_uniform(k.host(), 2, -1, 1);
  auto backend = create_backend("reference", {&model, &cache});
  backend->init_forward_metadata(b);
  harness::Staged q32(Device::cpu, DType::f32, {n, s.num_qo_heads, s.head_dim_qk});
  harness::Staged k32(Device::cpu, DType::f32, {n, s.num_kv_heads, s.head_dim_qk});
  for (int64_t e = 0; e < q.numel(); ++e) static_cast<float*>(q32.host_data())[e] = load_as_float(q.host_data(), DType::bf16, e);
  for (int64_t e = 0; e < k.numel(); ++e) static_cast<float*>(k32.host_data())[e] = load_as_float(k.host_data(), DType::bf16, e);
  backend->forward(0, q32.host(), k32.host(), k32.host(), out.host());
  const auto* o = static_cast<const float*>(out.host_data());
  return std::vector<float>(o, o + out.numel());
}

TEST(PagingInvariance, SameOutputForEveryPageSizeAndOrder) {
  const std::vector<float> base = run_with_pages(16, 0);
  for (auto [page_size, seed] : std::vector<std::pair<int, uint64_t>>{{1, 0}, {1, 7}, {3, 9}, {16, 5}, {256, 0}}) {
    const std::vector<float> got = run_with_pages(page_size, seed);
    ASSERT_EQ(got.size(), base.size());
    EXPECT_EQ(std::memcmp(got.data(), base.data(), got.size() * sizeof(float)), 0)
        << "page size " << page_size << " shuffle " << seed;
  }
}

}  // namespace
}  // namespace attnkit
