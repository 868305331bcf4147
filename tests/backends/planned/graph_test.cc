// CUDA graphs on the `planned` backend: a decode forward captured once replays later batches (new
// lengths, new page tables, splits where the captured one had none) bit-for-bit like a fresh run.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "attnkit/registry.h"
#include "backends/planned/backend.h"
#include "backends/planned/graph_state.h"
#include "gpu_test.h"
#include "harness/device_copy.h"
#include "output_bits.h"

namespace attnkit {
namespace {

constexpr int kBatch = 6;

struct Fixture {
  ModelSpec model;
  std::unique_ptr<KvCache> cache;

  explicit Fixture(const AttentionSpec& spec) {
    model.name = "graph";
    model.layers = {spec, spec};
    KvCacheConfig cfg = KvCacheConfig::for_spec(spec, /*num_layers=*/2);
    cfg.num_pages = 2048;
    cfg.page_size = 16;
    cfg.device = Device::cuda;
    cache = std::make_unique<KvCache>(cfg);
    cache->allocator().shuffle(3);
  }

  // A decode batch of new requests whose prefixes hold random K/V in both layers.
  ForwardBatch decode_batch(const std::vector<int64_t>& prefixes, uint64_t seed) {
    std::vector<RequestStep> steps;
    for (int64_t p : prefixes) steps.push_back({.id = -1, .prefix_len = p, .num_new_tokens = 1, .custom_mask = {}});
    ForwardBatch b = build_batch(*cache, steps);
    std::vector<int64_t> slots;
    for (int i = 0; i < b.batch_size(); ++i) {
      for (int64_t t = 0; t < b.prefix_lens[i]; ++t) slots.push_back(b.slot(i, t));
    }
    const auto n = static_cast<int64_t>(slots.size());
    const KvCacheConfig& c = cache->config();
    for (int layer = 0; layer < c.num_layers; ++layer) {
      harness::Staged loc(Device::cuda, DType::i64, {n});
      std::memcpy(loc.host_data(), slots.data(), slots.size() * sizeof(int64_t));
      harness::Staged k(Device::cuda, DType::f32, {n, c.num_kv_heads, c.head_dim_k});
      harness::Staged v(Device::cuda, DType::f32, {n, c.num_kv_heads, c.head_dim_v});
      harness::fill_uniform(k.host(), seed * 10 + static_cast<uint64_t>(layer) * 2, -1.0f, 1.0f);
      harness::fill_uniform(v.host(), seed * 10 + static_cast<uint64_t>(layer) * 2 + 1, -1.0f, 1.0f);
      loc.upload();
      k.upload();
      v.upload();
      cache->store(layer, k.dev(), v.dev(), loc.dev());
    }
    synchronize(Device::cuda);
    return b;
  }
};

AttentionSpec small_spec() {
  AttentionSpec spec;
  spec.num_qo_heads = 8;
  spec.num_kv_heads = 2;
  spec.head_dim_qk = spec.head_dim_vo = 64;
  return spec;
}

using testing::download_bits;

TEST(PlannedGraph, ReplayWithNewLengthsAndPagesEqualsAFreshRun) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  AttentionSpec spec;
  spec.num_qo_heads = 16;
  spec.num_kv_heads = 4;
  spec.head_dim_qk = spec.head_dim_vo = 128;
  spec.logits_soft_cap = 20.0f;
  spec.sinks.assign(16, 0.5f);
  Fixture f(spec);
  auto backend = create_backend("planned", {&f.model, f.cache.get()});
  backend->init_cuda_graph_state(kBatch, 2048);

  const std::vector<int64_t> dims = {kBatch, spec.num_qo_heads, spec.head_dim_qk};
  const std::vector<int64_t> kv_dims = {kBatch, spec.num_kv_heads, spec.head_dim_qk};
  harness::Staged q(Device::cuda, DType::bf16, dims), k(Device::cuda, DType::bf16, kv_dims),
      v(Device::cuda, DType::bf16, kv_dims), out(Device::cuda, DType::bf16, dims);
  harness::fill_uniform(q.host(), 1, -2.0f, 2.0f);
  harness::fill_uniform(k.host(), 2, -1.0f, 1.0f);
  harness::fill_uniform(v.host(), 3, -1.0f, 1.0f);
  q.upload();
  k.upload();
  v.upload();

  // Capture on short histories: no request is split, so the captured plan has no merges.
  const ForwardBatch first = f.decode_batch({10, 100, 31, 0, 64, 200}, 1);
  backend->init_forward_metadata(first);
  planned::CapturedGraph graph;
  graph.capture([&] { backend->forward_decode(1, q.dev(), k.dev(), v.dev(), out.dev()); });

  // A later batch of the same size: other requests, other lengths (one long enough to split), other pages.
  const ForwardBatch second = f.decode_batch({3000, 7, 512, 1, 1500, 90}, 2);
  backend->init_forward_metadata(second);
  ASSERT_GT(static_cast<PlannedBackend&>(*backend).decode_stats().num_merges, 0) << "the replayed plan must split";
  out.poison();
  graph.replay();
  backend->synchronize();
  const std::vector<uint16_t> replayed = download_bits(out);

  out.poison();
  backend->forward_decode(1, q.dev(), k.dev(), v.dev(), out.dev());
  backend->synchronize();
  const std::vector<uint16_t> fresh = download_bits(out);
  ASSERT_EQ(replayed.size(), fresh.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < fresh.size(); ++i) mismatches += replayed[i] != fresh[i];
  EXPECT_EQ(mismatches, 0u) << "replay and fresh run differ in " << mismatches << " of " << fresh.size()
                            << " elements";
  for (uint16_t bits : fresh) ASSERT_NE(bits, 0xFFFF) << "an output element was not written";
}

TEST(PlannedGraph, BatchesPastTheGraphLimitsStillRunOutsideIt) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  Fixture f(small_spec());
  auto backend = create_backend("planned", {&f.model, f.cache.get()});
  backend->init_cuda_graph_state(2, 16);
  // Eight requests do not fit a graph state of two: the plan goes to the ordinary buffer.
  const ForwardBatch b = f.decode_batch({5, 6, 7, 8, 9, 10, 11, 12}, 3);
  backend->init_forward_metadata(b);
  const std::vector<int64_t> dims = {8, 8, 64}, kv_dims = {8, 2, 64};
  harness::Staged q(Device::cuda, DType::bf16, dims), k(Device::cuda, DType::bf16, kv_dims),
      v(Device::cuda, DType::bf16, kv_dims), out(Device::cuda, DType::bf16, dims);
  harness::fill_uniform(q.host(), 4, -1.0f, 1.0f);
  q.upload();
  k.upload();
  v.upload();
  out.poison();
  backend->forward_decode(0, q.dev(), k.dev(), v.dev(), out.dev());
  backend->synchronize();
  for (uint16_t bits : download_bits(out)) ASSERT_NE(bits, 0xFFFF);
}

TEST(PlannedGraph, GraphStateArgumentsAreChecked) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  Fixture f(small_spec());
  auto backend = create_backend("planned", {&f.model, f.cache.get()});
  try {
    backend->init_cuda_graph_state(0, 16);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "planned init_cuda_graph_state: max_batch_size must be >= 1, got 0");
  }
}

}  // namespace
}  // namespace attnkit
