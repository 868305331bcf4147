// The rendered sources of the non-latent keys, pinned by their hash: the disk cache names a module
// by its source's hash, so a template change that alters them (the latent keys' passes included)
// would recompile every user's cached kernels and could change what runs. A change meant to alter
// them updates the hashes here. Each key twice: as rendered for an architecture before sm_90 (or
// none), and for sm_90 (compile_arch's), where the tile templates carry the PDL lines (source.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backends/jit/disk_cache.h"
#include "backends/jit/source.h"
#include "core/variant_expr.h"
#include "test_keys.h"

namespace attnkit::jit {
namespace {

using testing::make_key;

struct Pinned {
  KernelKey key;
  uint64_t hash;       // sm_80, and no architecture
  uint64_t hash_sm90;  // sm_90 / sm_90a
};

std::vector<Pinned> pinned() {
  KernelKey variants = make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {64, 4, 1, 2, 2});
  variants.score_mod = VariantExpr::parse("score - 0.0625f * (q_pos - kv_pos)", "score_mod").cuda_source();
  variants.mask_mod = VariantExpr::parse("kv_pos / 512 == q_pos / 512", "mask_mod").cuda_source();
  return {
      {make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {64, 1, 4, 1, 4}), 0xaf07c16438c2cd73ULL, 0xf11ac9094dfbaf8bULL},  // decode, the load's fast path
      {make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {64, 4, 1, 2, 2}), 0xc46167cfa6c62de7ULL, 0x1846f344917fa5f7ULL},  // prefill
      {make_key(192, 128, 16, 1, DType::f16, DType::f16, {64, 4, 1, 1, 3}), 0xfa47723396cfc5c2ULL, 0xff65336a978cc22cULL},  // qk != vo: the general load
      {make_key(256, 256, 8, 64, DType::bf16, DType::bf16, {128, 1, 4, 1, 2}), 0xb17c190a5ee4b8d6ULL, 0x9c100f33ebd86e98ULL},  // Q from shared memory
      {make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {128, 8, 1, 1, 2, true}), 0x03a5310fee83e1bdULL, 0xb17416eeda58f6daULL},  // wgmma_tile
      {make_key(96, 96, 2, 16, DType::bf16, DType::f16, {}), 0x67ba25c44a595965ULL, 0x67ba25c44a595965ULL},  // warp_row: no merge
      {variants, 0x798da3dcf07c32abULL, 0x35727ae42b7d30f3ULL},
  };
}

TEST(JitSourceStability, NonLatentKeysRenderAsBefore) {
  for (const Pinned& p : pinned()) {
    for (const char* arch : {"", "sm_80"}) {
      const uint64_t got = fnv1a64(render(p.key, arch));
      EXPECT_EQ(got, p.hash) << p.key.describe() << " for '" << arch << "': 0x" << std::hex << got;
    }
    const uint64_t got = fnv1a64(render(p.key, compile_arch(p.key, "sm_90")));
    EXPECT_EQ(got, p.hash_sm90) << p.key.describe() << " for sm_90: 0x" << std::hex << got;
  }
}

}  // namespace
}  // namespace attnkit::jit
