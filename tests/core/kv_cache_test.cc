// KvCache: request page tables, the store of new K/V (dtype conversion, fp8 scale) and its checks.
#include <gtest/gtest.h>

#include <cstring>

#include "attnkit/kv_cache.h"

namespace attnkit {
namespace {

KvCacheConfig small_config(DType dtype = DType::f32) {
  KvCacheConfig c;
  c.num_layers = 2;
  c.num_pages = 6;
  c.page_size = 4;
  c.num_kv_heads = 2;
  c.head_dim_k = 3;
  c.head_dim_v = 3;
  c.dtype = dtype;
  return c;
}

TEST(KvCache, RequestsGrowPageByPage) {
  KvCache cache(small_config());
  const RequestId r = cache.add_request();
  cache.reserve(r, 5);
  EXPECT_EQ(cache.pages(r).size(), 2u);
  cache.reserve(r, 8);
  EXPECT_EQ(cache.pages(r).size(), 2u);
  cache.reserve(r, 9);
  EXPECT_EQ(cache.pages(r).size(), 3u);
  EXPECT_EQ(cache.slot(r, 5), int64_t{cache.pages(r)[1]} * 4 + 1);
  cache.free_request(r);
  EXPECT_EQ(cache.allocator().num_free(), 6);
}

TEST(KvCache, OutOfPagesLeavesOtherRequestsAlone) {
  KvCache cache(small_config());
  const RequestId a = cache.add_request();
  const RequestId b = cache.add_request();
  cache.reserve(a, 12);
  const std::vector<int32_t> a_pages = cache.pages(a);
  EXPECT_THROW(cache.reserve(b, 13), OutOfPagesError);
  EXPECT_EQ(cache.pages(a), a_pages);
  EXPECT_EQ(cache.length(b), 0);
  EXPECT_TRUE(cache.pages(b).empty());
}

TEST(KvCache, StoreConvertsAndScales) {
  KvCacheConfig c = small_config(DType::e4m3);
  c.k_scale = 0.5f;
  c.v_scale = 2.0f;
  KvCache cache(c);
  std::vector<float> k(6, 1.0f), v(6, 1.0f);
  std::vector<int64_t> loc = {9};
  cache.store(1, TensorView(k.data(), DType::f32, Device::cpu, {1, 2, 3}),
              TensorView(v.data(), DType::f32, Device::cpu, {1, 2, 3}),
              TensorView(loc.data(), DType::i64, Device::cpu, {1}));
  const auto* kp = static_cast<const uint8_t*>(cache.k_pool(1));
  const auto* vp = static_cast<const uint8_t*>(cache.v_pool(1));
  EXPECT_EQ(kp[9 * 6], float_to_e4m3_bits(2.0f));  // 1 / 0.5
  EXPECT_EQ(vp[9 * 6 + 5], float_to_e4m3_bits(0.5f));  // 1 / 2
}

TEST(KvCache, RejectedStoreWritesNothing) {
  KvCache cache(small_config());
  auto* kp = static_cast<uint8_t*>(cache.k_pool(0));
  std::memset(kp, 0x5a, static_cast<size_t>(cache.config().num_slots()) * cache.config().k_slot_bytes());
  std::vector<float> k(12, 1.0f), v(12, 1.0f);
  std::vector<int64_t> loc = {3, 24};  // 24 is past the 24 slots
  try {
    cache.store(0, TensorView(k.data(), DType::f32, Device::cpu, {2, 2, 3}),
                TensorView(v.data(), DType::f32, Device::cpu, {2, 2, 3}),
                TensorView(loc.data(), DType::i64, Device::cpu, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cache store: out_cache_loc[1] must be in 0..23, got 24");
  }
  EXPECT_EQ(kp[3 * 6 * 4], 0x5a);  // slot 3 untouched
}

TEST(KvCache, StoreChecksShapes) {
  KvCache cache(small_config());
  std::vector<float> k(12, 1.0f);
  std::vector<int64_t> loc = {0, 1};
  try {
    cache.store(0, TensorView(k.data(), DType::f32, Device::cpu, {2, 2, 3}),
                TensorView(k.data(), DType::f32, Device::cpu, {2, 3, 2}),
                TensorView(loc.data(), DType::i64, Device::cpu, {2}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cache store: v must be [2, 2, 3], got [2, 3, 2] f32 cpu");
  }
}

TEST(KvCache, ConfigChecksNameTheField) {
  KvCacheConfig c = small_config();
  c.page_size = 300;
  try {
    KvCache cache(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cache: page_size must be in 1..256, got 300");
  }
}

TEST(KvCache, MlaHasOneLatentPool) {
  KvCacheConfig c = small_config();
  c.mla = true;
  c.num_kv_heads = 1;
  c.head_dim_k = 10;
  c.head_dim_v = 8;
  KvCache cache(c);
  EXPECT_EQ(cache.k_pool(0), cache.v_pool(0));
  EXPECT_EQ(cache.v_pool_view(0).dim(2), 10);  // V rows are read with the latent's stride
}

TEST(KvCache, ViewOverTheCallersPoolsStoresIntoThem) {
  const KvCacheConfig c = small_config();
  const size_t pool_floats = static_cast<size_t>(c.num_slots()) * 2 * 3;
  std::vector<float> k0(pool_floats), v0(pool_floats), k1(pool_floats), v1(pool_floats);
  KvCache cache(c, {k0.data(), k1.data()}, {v0.data(), v1.data()});
  EXPECT_EQ(cache.k_pool(1), k1.data());
  EXPECT_EQ(cache.v_pool_view(0).data, v0.data());
  std::vector<float> k(6, 3.0f), v(6, 4.0f);
  std::vector<int64_t> loc = {7};
  cache.store(1, TensorView(k.data(), DType::f32, Device::cpu, {1, 2, 3}),
              TensorView(v.data(), DType::f32, Device::cpu, {1, 2, 3}),
              TensorView(loc.data(), DType::i64, Device::cpu, {1}));
  EXPECT_EQ(k1[7 * 6 + 5], 3.0f);
  EXPECT_EQ(v1[7 * 6], 4.0f);
}

TEST(KvCache, ViewChecksThePoolCounts) {
  const KvCacheConfig c = small_config();
  std::vector<float> pool(static_cast<size_t>(c.num_slots()) * 6);
  try {
    KvCache cache(c, {pool.data()}, {pool.data(), pool.data()});
    FAIL() << "one K pool for two layers was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cache: k_pools must hold one pool a layer (2), got 1");
  }
  try {
    KvCache cache(c, {pool.data(), nullptr}, {pool.data(), pool.data()});
    FAIL() << "a null pool was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "cache: k_pools[1] must not be null");
  }
}

}  // namespace
}  // namespace attnkit
