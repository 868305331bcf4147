// CUDA graphs on the `mla` backend: a decode forward captured once replays later batches (new
// lengths, new page tables, splits where the captured plan had none) bit-for-bit like a fresh run,
// and batches past the graph bounds still run outside it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "attnkit/registry.h"
#include "backends/mla/backend.h"
#include "core/captured_graph.h"
#include "gpu_test.h"
#include "harness/device_copy.h"
#include "output_bits.h"

namespace attnkit {
namespace {

constexpr int kRank = 512, kRope = 64;

struct Fixture {
  AttentionSpec spec;
  ModelSpec model;
  std::unique_ptr<KvCache> cache;

  explicit Fixture(int heads) : spec(AttentionSpec::mla(heads, kRank, kRope, 1.0f / std::sqrt(192.0f))) {
    model.name = "mla-graph";
    model.layers = {spec, spec};
    KvCacheConfig cfg = KvCacheConfig::for_spec(spec, /*num_layers=*/2);
    cfg.num_pages = 1024;
    cfg.page_size = 64;
    cfg.device = Device::cuda;
    cache = std::make_unique<KvCache>(cfg);
    cache->allocator().shuffle(5);
  }

  // A decode batch of new requests whose prefixes hold random latents in both layers.
  ForwardBatch decode_batch(const std::vector<int64_t>& prefixes, uint64_t seed) {
    std::vector<RequestStep> steps;
    for (int64_t p : prefixes) steps.push_back({.id = -1, .prefix_len = p, .num_new_tokens = 1, .custom_mask = {}});
    ForwardBatch b = build_batch(*cache, steps);
    std::vector<int64_t> slots;
    for (int i = 0; i < b.batch_size(); ++i) {
      for (int64_t t = 0; t < b.prefix_lens[i]; ++t) slots.push_back(b.slot(i, t));
    }
    const auto n = static_cast<int64_t>(slots.size());
    for (int layer = 0; layer < 2; ++layer) {
      harness::Staged loc(Device::cuda, DType::i64, {n});
      std::memcpy(loc.host_data(), slots.data(), slots.size() * sizeof(int64_t));
      harness::Staged k(Device::cuda, DType::f32, {n, 1, kRank + kRope});
      harness::fill_uniform(k.host(), seed * 10 + static_cast<uint64_t>(layer), -1.0f, 1.0f);
      loc.upload();
      k.upload();
      cache->store(layer, k.dev(), TensorView(), loc.dev());
    }
    synchronize(Device::cuda);
    return b;
  }
};

using testing::download_bits;

bool mla_runs_here() { return Registry::global().get("mla").why_unavailable().empty(); }

// One eager decode of `tokens` 16-head tokens (layer 0, random q of `seed`) on the batch planned
// last: every output element is written.
void expect_decode_writes_every_output(AttentionBackend& backend, int tokens, uint64_t seed) {
  harness::Staged q(Device::cuda, DType::bf16, {tokens, 16, kRank + kRope});
  harness::Staged k(Device::cuda, DType::bf16, {tokens, 1, kRank + kRope});
  harness::Staged out(Device::cuda, DType::bf16, {tokens, 16, kRank});
  harness::fill_uniform(q.host(), seed, -1.0f, 1.0f);
  q.upload();
  k.upload();
  out.poison();
  backend.forward_decode(0, q.dev(), k.dev(), TensorView(), out.dev());
  backend.synchronize();
  for (uint16_t bits : download_bits(out)) ASSERT_NE(bits, 0xFFFF);
}

TEST(MlaGraph, ReplayWithNewLengthsAndPagesEqualsAFreshRun) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  if (!mla_runs_here()) GTEST_SKIP() << Registry::global().get("mla").why_unavailable();
  constexpr int kBatch = 5, kHeads = 16;
  Fixture f(kHeads);
  auto backend = create_backend("mla", {&f.model, f.cache.get()});
  ASSERT_TRUE(backend->capabilities().cuda_graph);
  backend->init_cuda_graph_state(kBatch, 1024);

  harness::Staged q(Device::cuda, DType::bf16, {kBatch, kHeads, kRank + kRope});
  harness::Staged k(Device::cuda, DType::bf16, {kBatch, 1, kRank + kRope});
  harness::Staged out(Device::cuda, DType::bf16, {kBatch, kHeads, kRank});
  harness::fill_uniform(q.host(), 1, -2.0f, 2.0f);
  harness::fill_uniform(k.host(), 2, -1.0f, 1.0f);
  q.upload();
  k.upload();

  // Capture on short histories: one tile each, nothing split.
  const ForwardBatch first = f.decode_batch({10, 40, 3, 0, 60}, 1);
  backend->init_forward_metadata(first);
  auto& mla = static_cast<MlaBackend&>(*backend);
  ASSERT_TRUE(mla.on_graph_buffer());
  ASSERT_TRUE(mla.last_plan().merges.empty());
  cuda::CapturedGraph graph;
  graph.capture([&] { backend->forward_decode(1, q.dev(), k.dev(), TensorView(), out.dev()); });

  // The same batch size later: other lengths (long ones split), other pages.
  const ForwardBatch second = f.decode_batch({9000, 7, 4000, 1, 2500}, 2);
  backend->init_forward_metadata(second);
  ASSERT_TRUE(mla.on_graph_buffer());
  ASSERT_FALSE(mla.last_plan().merges.empty()) << "the replayed plan must split";
  out.poison();
  graph.replay();
  backend->synchronize();
  const std::vector<uint16_t> replayed = download_bits(out);

  out.poison();
  backend->forward_decode(1, q.dev(), k.dev(), TensorView(), out.dev());
  backend->synchronize();
  const std::vector<uint16_t> fresh = download_bits(out);
  ASSERT_EQ(replayed.size(), fresh.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < fresh.size(); ++i) mismatches += replayed[i] != fresh[i];
  EXPECT_EQ(mismatches, 0u) << "replay and fresh run differ in " << mismatches << " of " << fresh.size() << " elements";
  for (uint16_t bits : fresh) ASSERT_NE(bits, 0xFFFF) << "an output element was not written";
}

// A plan inside a capture is refused before it touches anything; the backend plans and runs after.
TEST(MlaGraph, PlanInsideACaptureIsRefused) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  if (!mla_runs_here()) GTEST_SKIP() << Registry::global().get("mla").why_unavailable();
  Fixture f(16);
  auto backend = create_backend("mla", {&f.model, f.cache.get()});
  backend->init_cuda_graph_state(4, 256);
  const ForwardBatch b = f.decode_batch({10, 20, 30}, 1);
  cuda::CapturedGraph graph;
  try {
    graph.capture([&] { backend->init_forward_metadata(b); });
    FAIL() << "a plan inside a capture must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mla plan: the stream is capturing a CUDA graph"), std::string::npos)
        << e.what();
  }
  backend->init_forward_metadata(b);
  expect_decode_writes_every_output(*backend, 3, 5);
}

TEST(MlaGraph, BatchesPastTheBoundsRunOutsideTheGraphBuffer) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  if (!mla_runs_here()) GTEST_SKIP() << Registry::global().get("mla").why_unavailable();
  Fixture f(16);
  auto backend = create_backend("mla", {&f.model, f.cache.get()});
  backend->init_cuda_graph_state(2, 64);
  const ForwardBatch b = f.decode_batch({5, 6, 70, 8}, 3);
  backend->init_forward_metadata(b);
  EXPECT_FALSE(static_cast<MlaBackend&>(*backend).on_graph_buffer());
  expect_decode_writes_every_output(*backend, 4, 4);
}

TEST(MlaGraph, GraphStateArgumentsAreChecked) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  if (!mla_runs_here()) GTEST_SKIP() << Registry::global().get("mla").why_unavailable();
  Fixture f(16);
  auto backend = create_backend("mla", {&f.model, f.cache.get()});
  try {
    backend->init_cuda_graph_state(4, 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "mla init_cuda_graph_state: max_num_pages must be >= 1, got 0");
  }
}

}  // namespace
}  // namespace attnkit
