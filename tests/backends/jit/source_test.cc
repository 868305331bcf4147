// The jit kernel template, rendered for the keys users reach (head dims 64-256 and 96, 192/128,
// GQA groups, page sizes, bf16 / f16 q and cache, variants) and compiled by NVRTC for sm_90a here,
// without a GPU: a template that does not compile fails here, not on a user's first call.
#include "backends/jit/source.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backends/jit/config.h"
#include "backends/jit/kernels/tile_common.h"
#include "backends/jit/nvrtc.h"
#include "core/variant_expr.h"
#include "test_keys.h"

namespace attnkit::jit {
namespace {

using testing::make_key;

KernelKey key(int dk, int dv, int group, int page, DType q, DType kv) { return make_key(dk, dv, group, page, q, kv); }

TEST(JitSource, RendersEveryPlaceholder) {
  KernelKey k = key(192, 128, 4, 16, DType::bf16, DType::f16);
  k.score_mod = VariantExpr::parse("score - 0.0625f * (q_pos - kv_pos)", "score_mod").cuda_source();
  const std::string s = render_warp_row(k);
  EXPECT_EQ(s.find('$'), std::string::npos) << "an unreplaced placeholder";
  EXPECT_NE(s.find("#define HEAD_DIM_QK 192"), std::string::npos);
  EXPECT_NE(s.find("#define HEAD_DIM_VO 128"), std::string::npos);
  EXPECT_NE(s.find("return (score - (0.0625f * ((float)(q_pos - kv_pos))));"), std::string::npos);
  EXPECT_NE(s.find("return true;"), std::string::npos);  // no mask_mod
  EXPECT_EQ(k.describe(), "warp_row d192/128 g4 p16 bf16 kv f16 score_mod (score - (0.0625f * ((float)(q_pos - kv_pos))))");
}

TEST(JitSource, RendersTheTensorCoreTemplate) {
  KernelKey k = key(96, 96, 4, 16, DType::f16, DType::f16);
  k.tile = TileConfig{32, 4, 1, 2, 3};
  k.mask_mod = VariantExpr::parse("kv_pos / 512 == q_pos / 512", "mask_mod").cuda_source();
  const std::string s = render(k);
  EXPECT_EQ(s.find('$'), std::string::npos) << "an unreplaced placeholder";
  EXPECT_NE(s.find("#define HAS_MASK_MOD 1"), std::string::npos);
  EXPECT_NE(s.find("#define M_TILES 2"), std::string::npos);
  EXPECT_NE(s.find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"), std::string::npos);
  EXPECT_EQ(k.describe(), "mma_tile d96/96 g4 p16 f16 kv f16 n32 w4x1 m2 s3 mask_mod " + k.mask_mod);
  EXPECT_EQ(TileConfig::parse(k.tile.describe()), k.tile);
  EXPECT_FALSE(TileConfig::parse("n32 w4x1 m2 s3 extra").has_value());
  EXPECT_FALSE(TileConfig::parse("n32 w4x1 s3").has_value());
}

// The Hopper template: whole warpgroups of 64 rows, both products on wgmma; offered for prefill on
// sm_90 only, at head dims in 64s, and compiled there for sm_90a.
TEST(JitSource, RendersTheHopperTemplate) {
  KernelKey k = key(128, 128, 4, 16, DType::bf16, DType::bf16);
  k.tile = TileConfig{128, 8, 1, 1, 2, true};
  const std::string s = render(k);
  EXPECT_EQ(s.find('$'), std::string::npos) << "an unreplaced placeholder";
  EXPECT_NE(s.find("#define WGS 2"), std::string::npos);
  EXPECT_NE(s.find("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"), std::string::npos);
  EXPECT_EQ(k.describe(), "wgmma_tile d128/128 g4 p16 bf16 kv bf16 n128 w8x1 m1 s2 wgmma");
  EXPECT_EQ(TileConfig::parse(k.tile.describe()), k.tile);
  EXPECT_FALSE(TileConfig::parse("n96 w8x1 m1 s2 wgmma").has_value()) << "keys in 64-key steps";
  EXPECT_FALSE(TileConfig::parse("n128 w6x1 m1 s2 wgmma").has_value()) << "whole warpgroups";
  EXPECT_TRUE(wgmma_serves(k, "sm_90"));
  EXPECT_FALSE(wgmma_serves(k, "sm_100"));
  EXPECT_TRUE(wgmma_serves(key(96, 96, 4, 16, DType::bf16, DType::bf16), "sm_90"));
  EXPECT_FALSE(wgmma_serves(key(96, 96, 4, 16, DType::bf16, DType::f16), "sm_90")) << "q and cache of one dtype";
  EXPECT_EQ(compile_arch(k, "sm_90"), "sm_90a");
  EXPECT_EQ(compile_arch(key(128, 128, 4, 16, DType::bf16, DType::bf16), "sm_90"), "sm_90");
  auto has_wgmma = [](const std::vector<TileConfig>& ts) {
    return std::any_of(ts.begin(), ts.end(), [](const TileConfig& t) { return t.wgmma; });
  };
  EXPECT_TRUE(has_wgmma(tile_candidates(k, false, "sm_90")));
  EXPECT_FALSE(has_wgmma(tile_candidates(k, true, "sm_90"))) << "decode blocks of a few rows";
  EXPECT_FALSE(has_wgmma(tile_candidates(k, false, "sm_80")));
  EXPECT_TRUE(has_wgmma(tile_candidates(key(96, 96, 4, 16, DType::bf16, DType::bf16), false, "sm_90")));
  EXPECT_TRUE(has_wgmma(tile_candidates(key(72, 72, 4, 16, DType::f16, DType::f16), false, "sm_90")));
  const std::string wide = render(key(192, 128, 4, 16, DType::f16, DType::f16));  // mma_tile, the first candidate
  EXPECT_EQ(wide.find("wgmma"), std::string::npos);
}

TEST(JitSource, EveryKindOfKeyCompilesForSm90a) {
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::get(&why);
  if (!nvrtc) GTEST_SKIP() << why;
  std::vector<KernelKey> keys = {key(128, 128, 4, 16, DType::bf16, DType::bf16), key(64, 64, 1, 1, DType::f16, DType::f16),
                                 key(256, 256, 8, 64, DType::bf16, DType::f16), key(96, 96, 2, 256, DType::f16, DType::bf16),
                                 key(192, 128, 16, 32, DType::bf16, DType::bf16), key(8, 8, 64, 2, DType::bf16, DType::bf16)};
  KernelKey variants = keys[0];
  variants.score_mod = VariantExpr::parse("q_pos - kv_pos > 100 ? score * 0.5f : 30.0f * tanhf(score / 30.0f)", "s").cuda_source();
  variants.mask_mod = VariantExpr::parse("kv_pos / 512 == q_pos / 512 || kv_pos < 4", "m").cuda_source();
  keys.push_back(variants);
  KernelKey wgmma_variants = variants;  // the wgmma template's mask path (seen-tile range, flags read ahead)
  wgmma_variants.tile = TileConfig{128, 8, 1, 1, 2, true};
  keys.push_back(wgmma_variants);
  for (const KernelKey& k : keys) {
    const std::vector<char> cubin = nvrtc->compile_cubin(render(k, "sm_90a"), k.describe(), "sm_90a", {});
    EXPECT_GT(cubin.size(), 1000u) << k.describe();
  }
}

TEST(JitSource, EveryTileCandidateCompilesForSm90a) {
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::get(&why);
  if (!nvrtc) GTEST_SKIP() << why;
  std::vector<KernelKey> keys;
  for (const KernelKey& base : {key(128, 128, 4, 16, DType::bf16, DType::bf16), key(96, 96, 2, 1, DType::f16, DType::f16),
                                key(72, 72, 4, 16, DType::bf16, DType::bf16),
                                key(256, 256, 8, 64, DType::bf16, DType::bf16), key(192, 128, 1, 32, DType::bf16, DType::bf16)}) {
    for (bool decode : {true, false}) {
      for (const TileConfig& t : tile_candidates(base, decode, "sm_90")) {
        KernelKey k = base;
        k.tile = t;
        EXPECT_LE(tile_smem_bytes(k), kMaxSharedBytes) << k.describe();
        keys.push_back(k);
      }
    }
  }
  const std::vector<size_t> sizes = testing::compiled_sizes(*nvrtc, keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_GT(sizes[i], 1000u) << keys[i].describe();
}

// A mask_mod's kernel declares a few bytes of static shared memory beside its dynamic buffer: the
// candidates count them, so no tile chosen for a masked key asks for more than a CTA may hold. The
// mma tile of 64 rows and three stages of 128 keys at head dims 72 / 192 fills the buffer to the byte.
TEST(JitSource, MaskedTilesCountTheirStaticSharedMemory) {
  const KernelKey full = make_key(72, 192, 4, 16, DType::bf16, DType::bf16, TileConfig{128, 4, 1, 1, 3});
  EXPECT_EQ(tile_smem_bytes(full), kMaxSharedBytes);
  EXPECT_TRUE(tile_fits_shared_memory(full));
  KernelKey masked = full;
  masked.mask_mod = VariantExpr::parse("kv_pos / 64 == q_pos / 64", "mask_mod").cuda_source();
  EXPECT_FALSE(tile_fits_shared_memory(masked));
  for (int d = 8; d <= 256; d += 8) {
    KernelKey k = make_key(d, d, 4, 16, DType::bf16, DType::bf16);
    k.mask_mod = masked.mask_mod;
    for (bool decode : {true, false}) {
      for (const TileConfig& t : tile_candidates(k, decode, "sm_90")) {
        k.tile = t;
        EXPECT_LE(tile_smem_bytes(k) + kMaskStaticSmemBytes, kMaxSharedBytes) << k.describe();
      }
    }
  }
}

}  // namespace
}  // namespace attnkit::jit
