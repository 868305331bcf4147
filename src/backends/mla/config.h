// What the `mla` backend runs, written once: capabilities(), the plan's and the kernel's checks
// read it. Host-only: no CUDA header.
#pragma once

#include <array>
#include <string>

#include "attnkit/backend.h"
#include "attnkit/dtype.h"

namespace attnkit::mla {

struct Support {
  // The absorbed DeepSeek shape: scores over the whole 576-wide latent slot (512 + 64 RoPE
  // values), the output over its first 512.
  static constexpr int kv_lora_rank = 512;
  static constexpr int rope_dim = 64;
  static constexpr std::array<DType, 1> q_dtypes = {DType::bf16};   // q, the new latent and out
  static constexpr std::array<DType, 1> kv_dtypes = {DType::bf16};  // the latent cache
  // A K tile is 64 tokens, loaded as boxes of min(page_size, 64) slots; a box must start on a
  // 1024-byte boundary of the 128-byte-swizzled tile (8 rows), so pages of 8 slots or more that
  // divide 64 or are multiples of it.
  static constexpr std::array<int, 6> page_sizes = {8, 16, 32, 64, 128, 256};
};

inline constexpr int kHeadDimQk = Support::kv_lora_rank + Support::rope_dim;  // 576
inline constexpr int kHeadDimVo = Support::kv_lora_rank;                      // 512
inline constexpr int kTileRows = 64;    // query rows (heads x tokens) a CTA: one wgmma M
inline constexpr int kTileTokens = 64;  // KV tokens a tile

// Empty when Support covers the cache's page size and the dtypes; else the reason, naming the field.
std::string why_unsupported(int page_size, DType q_dtype, DType kv_dtype);
// Throws attnkit::Error "mla <who>: <reason>" unless why_unsupported is empty.
void check_supported(int page_size, DType q_dtype, DType kv_dtype, const char* who);

// Support as the Capabilities every caller reads (MLA only).
Capabilities capabilities();

}  // namespace attnkit::mla
