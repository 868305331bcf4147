// The jit backend's latent keys without a GPU: DeepSeek's absorbed MLA (one 576-value latent a
// token, V its first 512) keyed from the spec and cache, the refusals (an fp8 latent, other MLA
// dims), the tiles offered (they fit shared memory with Q and the ring 576 wide), and the rendered
// sources compiled by NVRTC for sm_90a, each tile the tuner may choose.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnkit/error.h"
#include "backends/jit/config.h"
#include "backends/jit/nvrtc.h"
#include "backends/jit/source.h"
#include "core/variant_expr.h"
#include "test_keys.h"

namespace attnkit::jit {
namespace {

AttentionSpec deepseek(int heads, int kv_lora_rank = 512, int rope = 64) {
  return AttentionSpec::mla(heads, kv_lora_rank, rope, 1.0f / std::sqrt(192.0f));
}

KvCacheConfig latent_cache(const AttentionSpec& spec, DType dtype, int page_size) {
  KvCacheConfig c = KvCacheConfig::for_spec(spec);
  c.dtype = dtype;
  c.page_size = page_size;
  return c;
}

// The message kernel_key_for throws, or empty where it keys the layer.
std::string refusal(const AttentionSpec& spec, const KvCacheConfig& cache, DType q_dtype) {
  try {
    kernel_key_for(spec, cache, q_dtype);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(JitLatent, KeysAnMlaLayerOverItsLatentCache) {
  const AttentionSpec spec = deepseek(16);
  const KernelKey k = kernel_key_for(spec, latent_cache(spec, DType::bf16, 64), DType::bf16);
  EXPECT_TRUE(k.latent);
  EXPECT_EQ(k.head_dim_qk, 576);
  EXPECT_EQ(k.head_dim_vo, 512);
  EXPECT_EQ(k.group, 16);
  EXPECT_EQ(k.page_size, 64);
  EXPECT_TRUE(k.tensor_cores());
  EXPECT_EQ(k.vo_passes(), 2);
  EXPECT_EQ(k.describe(), "mma_tile d576/512 g16 p64 bf16 kv bf16 latent n64 w4x1 m1 s2");
  KernelKey plain = k;
  plain.latent = false;
  EXPECT_FALSE(plain == k) << "a latent key is its own kernel";
  EXPECT_EQ(plain.vo_passes(), 1);
  // q and cache of two dtypes: the warp-row kernel, one pass.
  const KernelKey mixed = kernel_key_for(deepseek(128), latent_cache(deepseek(128), DType::f16, 1), DType::bf16);
  EXPECT_TRUE(mixed.latent);
  EXPECT_FALSE(mixed.tensor_cores());
  EXPECT_EQ(mixed.vo_passes(), 1);
  EXPECT_FALSE(kernel_key_for(AttentionSpec::dense(8, 2, 128), latent_cache(AttentionSpec::dense(8, 2, 128), DType::bf16, 16),
                              DType::bf16)
                   .latent);
}

TEST(JitLatent, CapabilitiesNameTheMlaDims) {
  const Capabilities c = capabilities();
  EXPECT_TRUE(c.mla);
  EXPECT_EQ(c.mla_dims, std::vector<int>{512});
  EXPECT_EQ(c.mla_rope_dims, std::vector<int>{64});
  EXPECT_FALSE(c.fp8_blocked_latent);
}

TEST(JitLatent, RefusesAnFp8LatentAndOtherDims) {
  const AttentionSpec spec = deepseek(16);
  KvCacheConfig e4m3 = latent_cache(spec, DType::e4m3, 64);
  EXPECT_EQ(refusal(spec, e4m3, DType::bf16), "jit: cache dtype must be one of bf16, f16, got e4m3");
  e4m3.latent_format = LatentFormat::fp8_blocked;
  EXPECT_EQ(refusal(spec, e4m3, DType::bf16), "jit: cache dtype must be one of bf16, f16, got e4m3");
  EXPECT_EQ(refusal(deepseek(16, 256), latent_cache(deepseek(16, 256), DType::bf16, 64), DType::bf16),
            "jit: MLA kv_lora_rank must be one of 512, got 256");
  EXPECT_EQ(refusal(deepseek(16, 512, 32), latent_cache(deepseek(16, 512, 32), DType::bf16, 64), DType::bf16),
            "jit: MLA qk_rope_head_dim must be one of 64, got 32");
  EXPECT_EQ(refusal(spec, latent_cache(spec, DType::f16, 1), DType::f16), "");
}

// Q (block_m rows) and the ring of K tiles, 584 values a row (576 and the 16-byte pad); no V tile.
TEST(JitLatent, TilesFitSharedMemoryAndRegisters) {
  KernelKey k = kernel_key_for(deepseek(16), latent_cache(deepseek(16), DType::bf16, 16), DType::bf16);
  for (bool decode : {true, false}) {
    const std::vector<TileConfig> tiles = tile_candidates(k, decode, "sm_90");
    ASSERT_FALSE(tiles.empty());
    for (const TileConfig& t : tiles) {
      k.tile = t;
      EXPECT_LE(tile_smem_bytes(k), kMaxSharedBytes) << k.describe();
      EXPECT_EQ(t.m_tiles, 1) << k.describe();
      EXPECT_FALSE(t.wgmma) << k.describe();
      EXPECT_EQ(t.block_m() <= 16, decode) << k.describe();
    }
  }
  k.tile = tile_candidates(k, false, "sm_90").front();
  EXPECT_EQ(k.tile.describe(), "n64 w4x1 m1 s2");
  EXPECT_EQ(mma_tile_smem_bytes(k), size_t{64 * 1168 + 2 * 64 * 1168});
  k.tile = tile_candidates(k, true, "sm_90").front();
  EXPECT_EQ(k.tile.describe(), "n64 w1x4 m1 s2");
  EXPECT_EQ(mma_tile_smem_bytes(k), size_t{16 * 1168 + 2 * 64 * 1168});
  EXPECT_FALSE(wgmma_serves(k, "sm_90"));
}

TEST(JitLatent, RendersThePasses) {
  KernelKey k = kernel_key_for(deepseek(16), latent_cache(deepseek(16), DType::bf16, 64), DType::bf16);
  k.tile = tile_candidates(k, true, "sm_90").front();
  const std::string s = render(k);
  EXPECT_EQ(s.find('$'), std::string::npos) << "an unreplaced placeholder";
  EXPECT_EQ(s.find("LATENT"), std::string::npos) << "the latent blocks are resolved when rendered";
  EXPECT_NE(s.find("#define VO_PASSES 2"), std::string::npos);
  EXPECT_NE(s.find("#define STAGE_BYTES K_BYTES"), std::string::npos);
  EXPECT_NE(s.find("out += blockIdx.z * DVO;"), std::string::npos);
  KernelKey plain = k;
  plain.latent = false;
  plain.head_dim_qk = plain.head_dim_vo = 128;
  const std::string p = render(plain);
  EXPECT_EQ(p.find("VO_PASSES"), std::string::npos);
  EXPECT_EQ(p.find("blockIdx.z"), std::string::npos);
  KernelKey mixed = k;
  mixed.kv_dtype = DType::f16;  // the warp-row kernel
  EXPECT_NE(render(mixed).find("v_pool + sj * HEAD_DIM_QK"), std::string::npos);
}

// Every tile a latent key may run (decode and prefill, bf16), the defaults in f16 and with a
// mask_mod, and the warp-row kernel (q and cache apart), compiled as the backend compiles them.
TEST(JitLatent, EveryLatentKernelCompilesForSm90a) {
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::get(&why);
  if (!nvrtc) GTEST_SKIP() << why;
  const KernelKey base = kernel_key_for(deepseek(16), latent_cache(deepseek(16), DType::bf16, 64), DType::bf16);
  std::vector<KernelKey> keys;
  for (bool decode : {true, false}) {
    for (const TileConfig& t : tile_candidates(base, decode, "sm_90")) {
      KernelKey k = base;
      k.tile = t;
      keys.push_back(k);
    }
    KernelKey f16 = base;
    f16.dtype = f16.kv_dtype = DType::f16;
    f16.group = 128;
    f16.tile = tile_candidates(f16, decode, "sm_90").front();
    keys.push_back(f16);
  }
  KernelKey masked = keys.front();
  masked.mask_mod = VariantExpr::parse("kv_pos / 64 == q_pos / 64 || kv_pos < 4", "mask_mod").cuda_source();
  keys.push_back(masked);
  KernelKey mixed = base;
  mixed.kv_dtype = DType::f16;
  keys.push_back(mixed);
  const std::vector<size_t> sizes = testing::compiled_sizes(*nvrtc, keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_GT(sizes[i], 1000u) << keys[i].describe();
}

}  // namespace
}  // namespace attnkit::jit
