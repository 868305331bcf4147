// Bad input at the backend boundary: every case gets an attnkit::Error naming the field, the value
// and the expectation, and leaves the cache as it was.
#include <gtest/gtest.h>

#include <cstring>

#include "attnkit/registry.h"
#include "backends/reference/backend.h"
#include "harness/device_copy.h"

namespace attnkit {
namespace {

// A backend that claims less than the reference, to see capability checks refuse it.
class LimitedBackend final : public AttentionBackend {
 public:
  using AttentionBackend::AttentionBackend;
  std::string name() const override { return "limited"; }
  Capabilities capabilities() const override {
    Capabilities c = reference::capabilities();
    c.sinks = false;
    c.decode = false;
    return c;
  }

 protected:
  void plan(const ForwardBatch&) override {}
  void run_extend(int, const TensorView&, const TensorView&, const TensorView&, const TensorView&) override {}
};

class BoundaryTest : public ::testing::Test {
 protected:
  ModelSpec model = make_preset("qwen3-0.6b", 2);  // 16 q heads, 8 kv heads, 128
  KvCache cache{[] {
    KvCacheConfig c;
    c.num_layers = 2;
    c.num_pages = 8;
    c.page_size = 4;
    c.num_kv_heads = 8;
    c.head_dim_k = 128;
    c.head_dim_v = 128;
    c.dtype = DType::bf16;
    return c;
  }()};
  ForwardBatch batch = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 3, .custom_mask = {}}});
  harness::Staged q{Device::cpu, DType::bf16, {3, 16, 128}};
  harness::Staged k{Device::cpu, DType::bf16, {3, 8, 128}};
  harness::Staged v{Device::cpu, DType::bf16, {3, 8, 128}};
  harness::Staged out{Device::cpu, DType::bf16, {3, 16, 128}};
  std::unique_ptr<AttentionBackend> backend = create_backend("reference", {&model, &cache});

  void SetUp() override {
    for (auto* t : {&q, &k, &v}) harness::fill_uniform(t->host(), 5, -1, 1);
    std::memset(cache.k_pool(0), 0x11, static_cast<size_t>(cache.config().num_slots()) * cache.config().k_slot_bytes());
  }
  template <typename F>
  void expect_error(F&& f, const std::string& message) {
    try {
      f();
      FAIL() << "no error; expected: " << message;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
    // Nothing was half-written.
    const auto* pool = static_cast<const uint8_t*>(cache.k_pool(0));
    for (size_t i = 0; i < static_cast<size_t>(cache.config().num_slots()) * cache.config().k_slot_bytes(); ++i) {
      ASSERT_EQ(pool[i], 0x11) << "cache byte " << i << " changed by a rejected call";
    }
  }
};

TEST_F(BoundaryTest, ForwardBeforePlan) {
  expect_error([&] { backend->forward(0, q.host(), k.host(), v.host(), out.host()); },
               "reference: init_forward_metadata must be called before forward");
}

TEST_F(BoundaryTest, QShape) {
  backend->init_forward_metadata(batch);
  harness::Staged bad(Device::cpu, DType::bf16, {3, 16, 64});
  expect_error([&] { backend->forward(0, bad.host(), k.host(), v.host(), out.host()); },
               "reference forward_extend: q must be [3, 16, 128], got [3, 16, 64] bf16 cpu");
}

TEST_F(BoundaryTest, DtypeMismatch) {
  backend->init_forward_metadata(batch);
  harness::Staged bad(Device::cpu, DType::f16, {3, 8, 128});
  expect_error([&] { backend->forward(0, q.host(), k.host(), bad.host(), out.host()); },
               "reference forward_extend: v dtype must match q (bf16), got f16");
}

TEST_F(BoundaryTest, WrongDevice) {
  backend->init_forward_metadata(batch);
  TensorView on_gpu = out.host();
  on_gpu.device = Device::cuda;
  expect_error([&] { backend->forward(0, q.host(), k.host(), v.host(), on_gpu); },
               "reference forward_extend: out must be on cpu, got cuda");
}

TEST_F(BoundaryTest, LayerOutOfRange) {
  backend->init_forward_metadata(batch);
  expect_error([&] { backend->forward(2, q.host(), k.host(), v.host(), out.host()); },
               "layer must be in 0..1 for model qwen3-0.6b, got 2");
}

TEST_F(BoundaryTest, DecodeOnAnExtendBatch) {
  backend->init_forward_metadata(batch);
  expect_error([&] { backend->forward_decode(0, q.host(), k.host(), v.host(), out.host()); },
               "reference forward_decode: the batch mode must be decode, got extend");
}

TEST_F(BoundaryTest, SpecAndCacheDisagree) {
  ModelSpec other = make_preset("llama3-8b", 2);  // 32 q / 8 kv / 128: same cache shape, other q heads
  other.layers[1].head_dim_qk = other.layers[1].head_dim_vo = 64;
  auto b = create_backend("reference", {&other, &cache});
  b->init_forward_metadata(batch);
  expect_error([&] { b->forward(1, q.host(), k.host(), v.host(), out.host()); },
               "reference forward_extend: the cache holds 8 kv heads of 128/128, layer 1 needs 8 of 64/64");
}

TEST_F(BoundaryTest, BadBatchIsRefusedAtPlan) {
  ForwardBatch bad = batch;
  bad.kv_page_indices[0] = 99;
  expect_error([&] { backend->init_forward_metadata(bad); }, "batch: kv_page_indices[0] must be in 0..7, got 99");
}

TEST_F(BoundaryTest, MissingFeatureIsRefusedBeforeWork) {
  ModelSpec with_sinks = model;
  with_sinks.layers[1].sinks.assign(16, 0.5f);
  LimitedBackend limited({&with_sinks, &cache});
  expect_error([&] { limited.init_forward_metadata(batch); }, "limited: attention sinks are not supported (layer 1)");
  ForwardBatch decode = build_batch(cache, {{.id = -1, .prefix_len = 2, .num_new_tokens = 1, .custom_mask = {}}});
  LimitedBackend plain({&model, &cache});
  expect_error([&] { plain.init_forward_metadata(decode); }, "limited: decode batches are not supported (layer 0)");
  // After a batch it runs, the layers are not checked again, but what a batch adds still is.
  plain.init_forward_metadata(batch);
  expect_error([&] { plain.init_forward_metadata(decode); }, "limited: decode batches are not supported (layer 0)");
}

}  // namespace
}  // namespace attnkit
