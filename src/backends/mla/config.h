// What the `mla` backend runs, written once: capabilities(), the plan's and the kernel's checks
// read it. Host-only: no CUDA header.
#pragma once

#include <array>
#include <string>

#include "attnkit/backend.h"
#include "attnkit/dtype.h"
#include "attnkit/kv_cache.h"

namespace attnkit::mla {

struct Support {
  // The absorbed DeepSeek shape: scores over the whole 576-wide latent slot (512 + 64 RoPE
  // values), the output over its first 512.
  static constexpr int kv_lora_rank = 512;
  static constexpr int rope_dim = 64;
  static constexpr std::array<DType, 1> q_dtypes = {DType::bf16};   // q, the new latent and out
  // The latent cache: bf16, or e4m3 in LatentFormat::fp8_blocked (read by the narrow kernels; a
  // plain e4m3 latent with the one k_scale is refused through capabilities().plain_e4m3_latent).
  static constexpr std::array<DType, 2> kv_dtypes = {DType::bf16, DType::e4m3};
  // A K tile is 64 tokens, loaded as boxes of min(page_size, 64) slots; a box must start on a
  // 1024-byte boundary of the 128-byte-swizzled tile (8 rows), so pages of 8 slots or more that
  // divide 64 or are multiples of it.
  static constexpr std::array<int, 6> page_sizes = {8, 16, 32, 64, 128, 256};
};

inline constexpr int kHeadDimQk = Support::kv_lora_rank + Support::rope_dim;  // 576
inline constexpr int kHeadDimVo = Support::kv_lora_rank;                      // 512
inline constexpr int kTileRows = 64;    // query rows (heads x tokens) a CTA at most: one wgmma M
inline constexpr int kTileTokens = 64;  // KV tokens a tile
// An fp8_blocked slot (kv_cache.h): 512 e4m3, 4 fp32 scales, then 64 bf16 RoPE values.
inline constexpr int kFp8RopeOffset = kHeadDimVo + 4 * (kHeadDimVo / kLatentScaleBlock);        // 528
inline constexpr int kFp8SlotBytes = kFp8RopeOffset + 2 * Support::rope_dim;                      // 656
// Raw fp8_blocked slots a TMA copy brings (the tensor map's box rows, at most): half a tile, so the
// narrow kernels' raw ring holds three pieces where it could hold one and a half tiles.
inline constexpr int kFp8PieceTokens = kTileTokens / 2;

// The query rows a work item takes, from the most rows (heads x new tokens) any request of the
// batch has: 16 where none has more (the 16-row narrow kernel, 16-head decode), else 64 (the
// 64-row kernel) on a bf16 cache and 32 on an fp8_blocked one (only the narrow kernels read it).
int tile_rows_for(int max_request_rows, bool fp8_latent);

// Empty when Support covers the cache's page size and dtype and q's dtype; else the reason, naming
// the field. (A plain e4m3 latent is refused by capabilities().plain_e4m3_latent.)
std::string why_unsupported(const KvCacheConfig& cache, DType q_dtype);
// Throws attnkit::Error "mla <who>: <reason>" unless why_unsupported is empty.
void check_supported(const KvCacheConfig& cache, DType q_dtype, const char* who);

// Support as the Capabilities every caller reads (MLA only).
Capabilities capabilities();

}  // namespace attnkit::mla
