// An e4m3 MLA latent has one scale: K and its V half are stored with k_scale and read back with it.
// Checked by hand on `reference` and `cpu`, and the store's rounding of value / scale.
#include <gtest/gtest.h>

#include <cmath>

#include "attnkit/registry.h"
#include "gpu_test.h"

namespace attnkit {
namespace {

// Latents of rank 2 + rope 1, one query head, scale 1; two new tokens on an e4m3 cache with
// k_scale 0.5 (every value below divided by 0.5 is exact in e4m3). Returns the [2, 1, 2] output.
std::vector<float> run_latent(const std::string& backend, float v_scale) {
  const AttentionSpec spec = AttentionSpec::mla(1, 2, 1, 1.0f);
  ModelSpec model;
  model.name = "latent by hand";
  model.layers = {spec};
  KvCacheConfig c = KvCacheConfig::for_spec(spec);
  c.num_pages = 4;
  c.page_size = 2;
  c.dtype = DType::e4m3;
  c.k_scale = 0.5f;
  c.v_scale = v_scale;
  KvCache cache(c);
  ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = 2, .custom_mask = {}}});
  std::vector<float> q = {0, 0, 0, 1, 2, 2};          // token 0's query does not matter: it sees itself only
  std::vector<float> latent = {1, 0, 0.5f, 0, 1, -0.5f};  // [V half (2) | rope (1)] per token
  std::vector<float> out(4, NAN);
  auto be = create_backend(backend, {&model, &cache});
  be->init_forward_metadata(b);
  be->forward(0, TensorView(q.data(), DType::f32, Device::cpu, {2, 1, 3}),
              TensorView(latent.data(), DType::f32, Device::cpu, {2, 1, 3}), TensorView(),
              TensorView(out.data(), DType::f32, Device::cpu, {2, 1, 2}));
  return out;
}

TEST(Fp8Latent, TheVHalfIsReadWithTheLatentsScale) {
  // Token 1: scores q . latent = 1 + 0 + 1 = 2 and 0 + 2 - 1 = 1; out = softmax . V halves.
  const double e = std::exp(1.0);
  const std::vector<double> want = {1, 0, e / (1 + e), 1 / (1 + e)};
  for (const char* backend : {"reference", "cpu"}) {
    const std::vector<float> out = run_latent(backend, 1.0f);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-6) << backend << " element " << i;
  }
}

TEST(Fp8Latent, AnMlaCacheRefusesASecondScale) {
  KvCacheConfig c = KvCacheConfig::for_spec(AttentionSpec::mla(16, 512, 64, 0.1f));
  c.dtype = DType::e4m3;
  c.k_scale = 0.5f;
  c.v_scale = 2.0f;
  try {
    KvCache cache(c);
    FAIL() << "an MLA cache with v_scale 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("v_scale must be left at 1, got 2"), std::string::npos) << e.what();
  }
}

// Values whose quotient by `scale` lies a few float steps from a midpoint between two e4m3 values:
// value * (1 / scale) in float lands on the other side of the midpoint for some of them.
std::vector<float> near_midpoints(float scale) {
  std::vector<float> k;
  for (int bits = 1; bits < 0x7e; ++bits) {
    float q = 0.5f * (e4m3_bits_to_float(static_cast<uint8_t>(bits)) + e4m3_bits_to_float(static_cast<uint8_t>(bits + 1)));
    for (int step = 0; step < 3; ++step) q = std::nextafter(q, 0.0f);
    for (int step = 0; step < 6; ++step, q = std::nextafter(q, INFINITY)) k.push_back(-(q * scale));
  }
  return k;
}

// The e4m3 bytes `device`'s store writes for `k` (one row) with this scale.
std::vector<uint8_t> stored_bytes(Device device, const std::vector<float>& k, float scale) {
  KvCacheConfig c;
  c.num_layers = 1;
  c.num_pages = 1;
  c.page_size = 1;
  c.num_kv_heads = 1;
  c.head_dim_k = c.head_dim_v = static_cast<int>(k.size());
  c.dtype = DType::e4m3;
  c.k_scale = c.v_scale = scale;
  c.device = device;
  KvCache cache(c);
  const int64_t n = static_cast<int64_t>(k.size());
  Buffer rows(device, k.size() * sizeof(float)), loc(device, sizeof(int64_t));
  const int64_t slot = 0;
  copy(rows.view(DType::f32, {1, 1, n}), TensorView(const_cast<float*>(k.data()), DType::f32, Device::cpu, {1, 1, n}));
  copy(loc.view(DType::i64, {1}), TensorView(const_cast<int64_t*>(&slot), DType::i64, Device::cpu, {1}));
  cache.store(0, rows.view(DType::f32, {1, 1, n}), rows.view(DType::f32, {1, 1, n}), loc.view(DType::i64, {1}));
  std::vector<uint8_t> out(k.size());
  copy(TensorView(out.data(), DType::u8, Device::cpu, {n}), TensorView(cache.k_pool(0), DType::u8, device, {n}));
  return out;
}

constexpr float kScales[] = {0.3f, 0.7f, 1.1f, 3.0f, 0.0137f, 0.123f};

TEST(Fp8Latent, TheStoreRoundsTheQuotient) {
  // Every stored byte is the quotient value / scale (a correctly rounded float division) rounded
  // to e4m3, as the header defines it.
  int checked = 0, wrong_by_reciprocal = 0;
  for (float scale : kScales) {
    const std::vector<float> k = near_midpoints(scale);
    const std::vector<uint8_t> stored = stored_bytes(Device::cpu, k, scale);
    for (size_t i = 0; i < k.size(); ++i) {
      const uint8_t want = float_to_e4m3_bits(k[i] / scale);
      ASSERT_EQ(stored[i], want) << "scale " << scale << ", value " << k[i] << ": stored "
                                 << e4m3_bits_to_float(stored[i]) << ", quotient rounds to " << e4m3_bits_to_float(want);
      wrong_by_reciprocal += float_to_e4m3_bits(k[i] * (1.0f / scale)) != want;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  EXPECT_GT(wrong_by_reciprocal, 0) << "no value tells the quotient from value * (1 / scale): the test checks nothing";
}

TEST(Fp8Latent, TheGpuStoreWritesTheSameBytes) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  for (float scale : kScales) {
    const std::vector<float> k = near_midpoints(scale);
    EXPECT_EQ(stored_bytes(Device::cuda, k, scale), stored_bytes(Device::cpu, k, scale)) << "scale " << scale;
  }
}

}  // namespace
}  // namespace attnkit
