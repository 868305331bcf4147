// The registry, `auto` selection and hybrid pairs.
#include <gtest/gtest.h>

#include <algorithm>

#include "attnkit/registry.h"
#include "core/backend_order.h"

namespace attnkit {
namespace {

AttentionSpec llama_layer() { return make_preset("llama3-8b").layer(0); }

KvCacheConfig cache_for(const AttentionSpec& s, Device device) {
  KvCacheConfig c = KvCacheConfig::for_spec(s);
  c.num_pages = 4;
  c.device = device;
  return c;
}

TEST(Registry, ReferenceIsAlwaysThere) {
  const BackendInfo& r = Registry::global().get("reference");
  EXPECT_EQ(r.device, Device::cpu);
  EXPECT_TRUE(r.capabilities().mla);
}

TEST(Registry, UnknownNameListsTheKnownOnes) {
  try {
    Registry::global().get("flash");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend must be one of reference"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("got 'flash'"), std::string::npos);
  }
}

TEST(Registry, DuplicateNamesAreRefused) {
  Registry r;
  r.add({.name = "x", .description = "", .device = Device::cpu, .capabilities = {}, .why_unavailable = {}, .create = {}});
  EXPECT_THROW(r.add({.name = "x", .description = "", .device = Device::cpu, .capabilities = {}, .why_unavailable = {},
                      .create = {}}),
               Error);
}

TEST(Auto, PicksACpuBackendForACpuCache) {
  const Selection s = select_backend(llama_layer(), cache_for(llama_layer(), Device::cpu));
  EXPECT_TRUE(s.backend == "cpu" || s.backend == "reference") << s.backend;
  EXPECT_NE(s.reason.find("chose " + s.backend), std::string::npos) << s.reason;
}

TEST(Auto, ExplainsWhyBetterRankedBackendsWereSkipped) {
  // An f32 cache on the CPU with q in f32: every CPU backend has to say yes or why not.
  KvCacheConfig c = cache_for(llama_layer(), Device::cpu);
  c.dtype = DType::f32;
  const Selection s = select_backend(llama_layer(), c);
  EXPECT_FALSE(s.backend.empty());
}

// The written rules put hopper ahead of planned only where its extend kernel was measured the
// faster: a 16-bit cache of pages of 16 slots or more, head dims 64, 128 and 256.
TEST(Auto, HopperLeadsOnlyWhereMeasuredFaster) {
  auto rank = [](const KvCacheConfig& c, const std::string& name) {
    const auto order = backend_order(c);
    return std::find_if(order.begin(), order.end(), [&](const char* n) { return name == n; }) - order.begin();
  };
  KvCacheConfig c = cache_for(llama_layer(), Device::cuda);
  ASSERT_EQ(c.head_dim_k, 128);
  for (int page : {16, 32, 64, 128}) {
    c.page_size = page;
    EXPECT_LT(rank(c, "hopper"), rank(c, "planned")) << "page " << page;
  }
  for (int page : {1, 8}) {
    c.page_size = page;
    EXPECT_GT(rank(c, "hopper"), rank(c, "planned")) << "page " << page;
  }
  c.page_size = 64;
  c.dtype = DType::e4m3;
  EXPECT_GT(rank(c, "hopper"), rank(c, "planned"));
  c.dtype = DType::bf16;
  for (int dim : {64, 256}) {
    c.head_dim_k = c.head_dim_v = dim;
    EXPECT_LT(rank(c, "hopper"), rank(c, "planned")) << "head dim " << dim;
  }
  const auto cpu = backend_order(cache_for(llama_layer(), Device::cpu));
  EXPECT_EQ(std::vector<std::string>(cpu.begin(), cpu.end()), (std::vector<std::string>{"cpu", "reference"}));
}

TEST(Hybrid, SameLayoutPairWorks) {
  const ModelSpec model = make_preset("qwen3-0.6b", 1);
  KvCache cache(cache_for(model.layer(0), Device::cpu));
  auto h = create_hybrid_backend("reference", "reference", {&model, &cache});
  EXPECT_EQ(h->name(), "reference+reference");
}

TEST(Hybrid, DevicesMustAgree) {
  std::string gpu;
  for (const auto& b : Registry::global().all()) {
    if (b.device == Device::cuda) gpu = b.name;
  }
  if (gpu.empty()) GTEST_SKIP() << "no GPU backend built into this library";
  const ModelSpec model = make_preset("qwen3-0.6b", 1);
  KvCache cache(cache_for(model.layer(0), Device::cpu));
  try {
    create_hybrid_backend("reference", gpu, {&model, &cache});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "hybrid reference (prefill) + " + gpu +
                                         " (decode): both must read one cache, but reference runs on cpu and " + gpu +
                                         " on cuda");
  }
}

}  // namespace
}  // namespace attnkit
