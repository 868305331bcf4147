// The rendered sources of the non-latent keys, pinned by their hash: the disk cache names a module
// by its source's hash, so a template change that alters them (the latent keys' passes included)
// would recompile every user's cached kernels and could change what runs. A change meant to alter
// them updates the hashes here.
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
  uint64_t hash;
};

std::vector<Pinned> pinned() {
  KernelKey variants = make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {64, 4, 1, 2, 2});
  variants.score_mod = VariantExpr::parse("score - 0.0625f * (q_pos - kv_pos)", "score_mod").cuda_source();
  variants.mask_mod = VariantExpr::parse("kv_pos / 512 == q_pos / 512", "mask_mod").cuda_source();
  return {
      {make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {64, 1, 4, 1, 4}), 0xa8ad9325457bf7e2ULL},  // decode, the load's fast path
      {make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {64, 4, 1, 2, 2}), 0xd73e3eff6276935eULL},  // prefill
      {make_key(192, 128, 16, 1, DType::f16, DType::f16, {64, 4, 1, 1, 3}), 0x01097c55c5ea703bULL},  // qk != vo: the general load
      {make_key(256, 256, 8, 64, DType::bf16, DType::bf16, {128, 1, 4, 1, 2}), 0x59a4293fdc8605e7ULL},  // Q from shared memory
      {make_key(128, 128, 4, 16, DType::bf16, DType::bf16, {128, 8, 1, 1, 2, true}), 0x7ac0f655772fd793ULL},  // wgmma_tile
      {make_key(96, 96, 2, 16, DType::bf16, DType::f16, {}), 0x492e6ef5ecea25aeULL},  // warp_row
      {variants, 0x159eefa0a71dc8a0ULL},
  };
}

TEST(JitSourceStability, NonLatentKeysRenderAsBefore) {
  for (const Pinned& p : pinned()) {
    const uint64_t got = fnv1a64(render(p.key));
    EXPECT_EQ(got, p.hash) << p.key.describe() << ": 0x" << std::hex << got;
  }
}

}  // namespace
}  // namespace attnkit::jit
