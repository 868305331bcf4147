// merge_states against attention over the unsplit history (the reference's output and LSE).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attnkit/merge.h"
#include "backends/reference/kernels/attention.h"
#include "harness/device_copy.h"

namespace attnkit {
namespace {

// Attention of one decode token over `kv` keys [lo, hi) of a single-page-size-1 cache.
struct Split {
  std::vector<float> o, lse;
};

Split attend_range(const AttentionSpec& spec, const std::vector<float>& k, const std::vector<float>& v,
                   const std::vector<float>& q, int lo, int hi) {
  KvCacheConfig c = KvCacheConfig::for_spec(spec);
  c.num_pages = std::max(1, hi - lo);
  c.page_size = 1;
  c.dtype = DType::f32;
  ForwardBatch b;
  b.page_size = 1;
  b.qo_indptr = {0, 1};
  b.kv_page_indptr = {0, hi - lo};
  for (int p = 0; p < hi - lo; ++p) b.kv_page_indices.push_back(p);
  b.kv_last_page_len = {hi > lo ? 1 : 0};
  b.prefix_lens = {hi - lo - 1};
  const int row = spec.num_kv_heads * spec.head_dim_qk;
  Split s;
  s.o.assign(static_cast<size_t>(spec.num_qo_heads * spec.head_dim_vo), 0.0f);
  s.lse.assign(static_cast<size_t>(spec.num_qo_heads), 0.0f);
  if (hi == lo) {  // an empty chunk: zero output, lse -inf
    std::fill(s.lse.begin(), s.lse.end(), -std::numeric_limits<float>::infinity());
    return s;
  }
  reference::AttentionParams p;
  AttentionSpec full = spec;
  full.causal = false;
  p.spec = &full;
  p.cache = &c;
  p.k_pool = k.data() + static_cast<size_t>(lo) * row;
  p.v_pool = v.data() + static_cast<size_t>(lo) * row;
  p.batch = &b;
  p.q = q.data();
  p.q_dtype = DType::f32;
  p.out = s.o.data();
  p.out_dtype = DType::f32;
  p.lse = s.lse.data();
  reference::attention(p);
  return s;
}

TEST(MergeStates, SplitsMergeToTheUnsplitResult) {
  AttentionSpec spec;
  spec.num_qo_heads = 4;
  spec.num_kv_heads = 2;
  spec.head_dim_qk = 16;
  spec.head_dim_vo = 16;
  const int kv_len = 100;
  std::vector<float> k(static_cast<size_t>(kv_len * 2 * 16)), v(k.size()), q(4 * 16);
  harness::fill_uniform(TensorView(k.data(), DType::f32, Device::cpu, {static_cast<int64_t>(k.size())}), 1, -1, 1);
  harness::fill_uniform(TensorView(v.data(), DType::f32, Device::cpu, {static_cast<int64_t>(v.size())}), 2, -1, 1);
  harness::fill_uniform(TensorView(q.data(), DType::f32, Device::cpu, {static_cast<int64_t>(q.size())}), 3, -3, 3);
  const Split whole = attend_range(spec, k, v, q, 0, kv_len);
  // Uneven chunks, one of them empty.
  std::vector<Split> parts = {attend_range(spec, k, v, q, 0, 7), attend_range(spec, k, v, q, 7, 7),
                              attend_range(spec, k, v, q, 7, 64), attend_range(spec, k, v, q, 64, kv_len)};
  std::vector<AttentionState> states;
  for (auto& p : parts) {
    states.push_back({TensorView(p.o.data(), DType::f32, Device::cpu, {1, 4, 16}),
                      TensorView(p.lse.data(), DType::f32, Device::cpu, {1, 4})});
  }
  std::vector<float> o(64), lse(4);
  merge_states(states, {TensorView(o.data(), DType::f32, Device::cpu, {1, 4, 16}),
                        TensorView(lse.data(), DType::f32, Device::cpu, {1, 4})});
  for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], whole.o[i], 1e-6) << i;
  for (size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], whole.lse[i], 1e-5) << i;
}

TEST(MergeStates, AllEmptyGivesZerosNotNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> o1(4, 0.0f), l1(1, -inf), o2(4, 0.0f), l2(1, -inf), o(4, 7.0f), l(1, 7.0f);
  auto state = [](std::vector<float>& o, std::vector<float>& l) {
    return AttentionState{TensorView(o.data(), DType::f32, Device::cpu, {1, 1, 4}),
                          TensorView(l.data(), DType::f32, Device::cpu, {1, 1})};
  };
  merge_states({state(o1, l1), state(o2, l2)}, state(o, l));
  for (float x : o) EXPECT_EQ(x, 0.0f);
  EXPECT_EQ(l[0], -inf);
}

}  // namespace
}  // namespace attnkit
