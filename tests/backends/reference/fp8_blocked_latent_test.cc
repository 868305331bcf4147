// The fp8_blocked MLA latent (kv_cache.h: LatentFormat): the slot bytes the host store writes,
// worked out by hand; the values read back; the configurations refused; and `reference` over such a
// cache equal to `reference` over an f32 cache holding the values the slots decode to, `cpu` within
// its fp32 sums of both.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "attnkit/registry.h"
#include "gpu_test.h"
#include "attnkit/latent_fp8.h"

namespace attnkit {
namespace {

KvCacheConfig blocked(const AttentionSpec& spec, int pages, int page_size) {
  KvCacheConfig c = KvCacheConfig::for_spec(spec);
  c.num_pages = pages;
  c.page_size = page_size;
  c.dtype = DType::e4m3;
  c.latent_format = LatentFormat::fp8_blocked;
  return c;
}

TEST(Fp8BlockedLatent, SlotBytesByHand) {
  // One block of 128 NoPE values, largest magnitude 224, so scale 224 / 448 = 0.5; 2 RoPE values.
  std::vector<float> latent(130, 0.0f);
  latent[0] = 224.0f;     // 448 -> 0x7e, e4m3's largest finite
  latent[1] = 1.0f;       // 2.0 = 2^1 -> exponent 1 + 7 = 8: 0x40
  latent[2] = -0.75f;     // -1.5 = -(1 + 4/8) 2^0 -> 0x80 | 7 << 3 | 4 = 0xbc
  latent[3] = 0.0013f;    // 0.0026 is subnormal: 0.0026 x 2^9 = 1.33 -> 1 unit: 0x01
  latent[128] = 1.0f;     // bf16 0x3f80
  latent[129] = -2.5f;    // bf16 0xc020
  const KvCacheConfig c = blocked(AttentionSpec::mla(1, 128, 2, 1.0f), 1, 2);
  ASSERT_EQ(c.k_slot_bytes(), 128u + 4u + 4u);
  KvCache cache(c);
  const int64_t slot = 1;
  cache.store(0, TensorView(latent.data(), DType::f32, Device::cpu, {1, 1, 130}), TensorView(),
              TensorView(const_cast<int64_t*>(&slot), DType::i64, Device::cpu, {1}));
  const uint8_t* s = static_cast<const uint8_t*>(cache.k_pool(0)) + c.k_slot_bytes();
  EXPECT_EQ(s[0], 0x7e);
  EXPECT_EQ(s[1], 0x40);
  EXPECT_EQ(s[2], 0xbc);
  EXPECT_EQ(s[3], 0x01);
  for (int e = 4; e < 128; ++e) ASSERT_EQ(s[e], 0x00) << e;
  const uint8_t scale[4] = {0x00, 0x00, 0x00, 0x3f};  // 0.5f, little-endian
  EXPECT_EQ(std::memcmp(s + 128, scale, 4), 0);
  const uint8_t rope[4] = {0x80, 0x3f, 0x20, 0xc0};
  EXPECT_EQ(std::memcmp(s + 132, rope, 4), 0);

  std::vector<float> back(130, NAN);
  decode_fp8_blocked_latent(s, 130, 128, back.data());
  EXPECT_EQ(back[0], 224.0f);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], -0.75f);
  EXPECT_EQ(back[3], 0.5f / 512.0f);  // one subnormal unit (2^-9) times the scale
  EXPECT_EQ(back[128], 1.0f);
  EXPECT_EQ(back[129], -2.5f);
}

TEST(Fp8BlockedLatent, AnAllZeroBlockHasScaleOneAndEachBlockItsOwn) {
  std::vector<float> latent(256 + 64, 0.0f);
  for (int e = 128; e < 256; ++e) latent[static_cast<size_t>(e)] = 0.01f * static_cast<float>(e - 192);  // max |x| 0.64
  std::vector<uint8_t> slot(256 + 8 + 128, 0xff);
  encode_fp8_blocked_latent(latent.data(), 320, 256, slot.data());
  float s0, s1;
  std::memcpy(&s0, slot.data() + 256, 4);
  std::memcpy(&s1, slot.data() + 260, 4);
  EXPECT_EQ(s0, 1.0f);
  EXPECT_EQ(s1, 0.64f / 448.0f);
  std::vector<float> back(320);
  decode_fp8_blocked_latent(slot.data(), 320, 256, back.data());
  for (int e = 0; e < 128; ++e) ASSERT_EQ(back[static_cast<size_t>(e)], 0.0f);
  for (int e = 128; e < 256; ++e) {
    // e4m3 keeps 3 mantissa bits: within half a step (2^-4 relative) of the value, or of the
    // subnormal unit for the smallest ones.
    const float x = latent[static_cast<size_t>(e)];
    EXPECT_NEAR(back[static_cast<size_t>(e)], x, std::max(std::fabs(x) / 16.0f, s1 / 1024.0f)) << e;
  }
}

TEST(Fp8BlockedLatent, DeepseekSlotIs656BytesAndItsPoolAViewOfBytes) {
  const KvCacheConfig c = blocked(AttentionSpec::mla(16, 512, 64, 0.1f), 2, 64);
  EXPECT_EQ(c.k_slot_bytes(), 656u);
  KvCache cache(c);
  const TensorView v = cache.k_pool_view(0);
  EXPECT_EQ(v.dtype, DType::u8);
  EXPECT_EQ(v.nbytes(), 128u * 656u);
}

TEST(Fp8BlockedLatent, RefusedWhereTheLayoutDoesNotApply) {
  const AttentionSpec mla = AttentionSpec::mla(16, 512, 64, 0.1f);
  const auto refused = [](KvCacheConfig c, const std::string& want) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted; wanted: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  KvCacheConfig bf16 = blocked(mla, 1, 64);
  bf16.dtype = DType::bf16;
  refused(bf16, "fp8_blocked stores e4m3, so dtype must be e4m3, got bf16");
  KvCacheConfig scaled = blocked(mla, 1, 64);
  scaled.k_scale = 0.5f;
  refused(scaled, "k_scale must be left at 1, got 0.5");
  refused(blocked(AttentionSpec::mla(16, 500, 64, 0.1f), 1, 64), "head_dim_v must be a multiple of it, got 500");
  KvCacheConfig dense = KvCacheConfig::for_spec(AttentionSpec::dense(8, 8, 128));
  dense.num_pages = 1;
  dense.dtype = DType::e4m3;
  dense.latent_format = LatentFormat::fp8_blocked;
  refused(dense, "this cache is not MLA");
}

// `reference` over an fp8_blocked cache, and over an f32 cache of the values its slots decode to.
TEST(Fp8BlockedLatent, ReferenceReadsTheDecodedValues) {
  const AttentionSpec spec = AttentionSpec::mla(4, 256, 64, 0.07f);
  ModelSpec model;
  model.name = "fp8 blocked latent";
  model.layers = {spec};
  const int tokens = 37, dk = 320;
  std::vector<float> latent(static_cast<size_t>(tokens) * dk), q(static_cast<size_t>(tokens) * 4 * dk);
  for (size_t i = 0; i < latent.size(); ++i) latent[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::cos(0.11f * static_cast<float>(i));
  std::vector<float> decoded(latent.size());
  std::vector<uint8_t> slot(256 + 8 + 128);
  for (int t = 0; t < tokens; ++t) {
    encode_fp8_blocked_latent(&latent[static_cast<size_t>(t) * dk], dk, 256, slot.data());
    decode_fp8_blocked_latent(slot.data(), dk, 256, &decoded[static_cast<size_t>(t) * dk]);
  }
  const auto run = [&](KvCacheConfig c, const std::vector<float>& k, const std::string& backend) {
    KvCache cache(c);
    ForwardBatch b = build_batch(cache, {{.id = -1, .prefix_len = 0, .num_new_tokens = tokens, .custom_mask = {}}});
    std::vector<float> out(static_cast<size_t>(tokens) * 4 * 256, NAN);
    auto be = create_backend(backend, {&model, &cache});
    be->init_forward_metadata(b);
    be->forward(0, TensorView(q.data(), DType::f32, Device::cpu, {tokens, 4, dk}),
                TensorView(const_cast<float*>(k.data()), DType::f32, Device::cpu, {tokens, 1, dk}), TensorView(),
                TensorView(out.data(), DType::f32, Device::cpu, {tokens, 4, 256}));
    return out;
  };
  KvCacheConfig plain = KvCacheConfig::for_spec(spec);
  plain.num_pages = 8;
  plain.page_size = 8;
  plain.dtype = DType::f32;
  const std::vector<float> want = run(plain, decoded, "reference");
  const std::vector<float> got = run(blocked(spec, 8, 8), latent, "reference");
  for (size_t i = 0; i < want.size(); ++i) ASSERT_FLOAT_EQ(got[i], want[i]) << "element " << i;
  // `cpu` decodes each row into its f32 tiles: fp32 sums against fp64, over up to 37 keys.
  const std::vector<float> cpu = run(blocked(spec, 8, 8), latent, "cpu");
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(cpu[i], want[i], 1e-5 * (1.0 + std::fabs(want[i]))) << "element " << i;
}

// The device store against the host's, byte for byte: random latents in bf16 (what a model hands
// over) with blocks of very different magnitudes, and an all-zero block.
TEST(Fp8BlockedLatent, TheGpuStoreWritesTheHostsBytes) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const AttentionSpec spec = AttentionSpec::mla(16, 512, 64, 0.1f);
  const int tokens = 40;
  std::vector<uint16_t> latent(static_cast<size_t>(tokens) * 576);
  for (size_t i = 0; i < latent.size(); ++i) {
    const size_t block = (i % 576) / 128;
    const float magnitude = block == 0 ? 0.0f : std::ldexp(1.0f, static_cast<int>(block) * 5 - 12);
    latent[i] = float_to_bf16_bits(std::sin(0.731f * static_cast<float>(i)) * magnitude + (i % 576 >= 512 ? 0.3f : 0.0f));
  }
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  for (int t = 0; t < tokens; ++t) slots[static_cast<size_t>(t)] = (t * 7) % 64;  // out of order
  std::vector<std::vector<uint8_t>> bytes;
  for (Device device : {Device::cpu, Device::cuda}) {
    KvCacheConfig c = blocked(spec, 1, 64);
    c.device = device;
    KvCache cache(c);
    Buffer rows(device, latent.size() * 2), loc(device, slots.size() * sizeof(int64_t));
    copy(rows.view(DType::bf16, {tokens, 1, 576}), TensorView(latent.data(), DType::bf16, Device::cpu, {tokens, 1, 576}));
    copy(loc.view(DType::i64, {tokens}), TensorView(slots.data(), DType::i64, Device::cpu, {tokens}));
    cache.store(0, rows.view(DType::bf16, {tokens, 1, 576}), TensorView(), loc.view(DType::i64, {tokens}));
    std::vector<uint8_t> out(64 * c.k_slot_bytes());
    copy(TensorView(out.data(), DType::u8, Device::cpu, {static_cast<int64_t>(out.size())}),
         TensorView(cache.k_pool(0), DType::u8, device, {static_cast<int64_t>(out.size())}));
    bytes.push_back(std::move(out));
  }
  for (int t = 0; t < tokens; ++t) {
    const size_t at = static_cast<size_t>(slots[static_cast<size_t>(t)]) * 656;
    for (size_t b = 0; b < 656; ++b) {
      ASSERT_EQ(bytes[1][at + b], bytes[0][at + b]) << "token " << t << ", byte " << b << " (device "
                                                  << int(bytes[1][at + b]) << ", host " << int(bytes[0][at + b]) << ")";
    }
  }
}

TEST(Fp8BlockedLatent, BackendsThatDoNotReadTheLayoutSaySo) {
  const AttentionSpec spec = AttentionSpec::mla(16, 512, 64, 0.1f);
  Capabilities none;
  none.mla = true;
  none.kv_dtypes = {DType::e4m3};
  EXPECT_EQ(why_unsupported(none, spec, blocked(spec, 1, 64)),
            "the fp8_blocked latent cache (e4m3 in blocks of 128 with their scales, RoPE in bf16) is not supported");
  none.fp8_blocked_latent = true;
  EXPECT_EQ(why_unsupported(none, spec, blocked(spec, 1, 64)), "");
}

}  // namespace
}  // namespace attnkit
