// What the `hopper` backend runs, written once: capabilities(), the extend kernel's checks and its
// dispatch read it. Extend runs on this backend's kernel (TMA + wgmma, warp-specialised); decode
// on `planned`'s decode kernel, whose support is wider (planned/config.h). Host-only.
#pragma once

#include <array>
#include <string>

#include "attnkit/backend.h"
#include "attnkit/dtype.h"

namespace attnkit::hopper {

struct Support {
  static constexpr std::array<int, 3> head_dims = {64, 128, 256};              // head_dim_qk == head_dim_vo
  static constexpr std::array<DType, 2> q_dtypes = {DType::f16, DType::bf16};   // q, k, v and out
  // The cache: q's dtype, or e4m3 (read as stored x k_scale / v_scale, dequantised as rows load),
  // whose scales must stay under max_e4m3_scale (the dequantising multiply's factor is scale x 2^120).
  static constexpr std::array<DType, 3> kv_dtypes = {DType::f16, DType::bf16, DType::e4m3};
  static constexpr float max_e4m3_scale = 255.0f;
  // Powers of two. Pages of min_tma_page_size slots or more: K/V tiles come as TMA boxes of
  // min(page_size, 64 or 128) slots, each starting on a 1024-byte boundary of the
  // 128-byte-swizzled tile (8 rows). Smaller pages: the producer gathers rows with cp.async.
  static constexpr std::array<int, 9> page_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  static constexpr int min_tma_page_size = 8;
  static constexpr int fp8_products_head_dim = 128;  // BackendOptions::hopper_fp8_products: d128 only
  static constexpr int max_group = 128;  // query heads a KV head: a tile holds at least one token
};

// The GQA-packed rows an extend tile of block_m rows holds: whole tokens only (the Q box is tokens
// x group rows).
constexpr int tile_rows(int block_m, int group) { return block_m / group * group; }

struct KernelKey {
  int head_dim = 0;
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
};

// Empty when Support covers the extend kernel's key, page size and GQA group; else the reason.
std::string why_unsupported(const KernelKey& key, int page_size, int group);

// Empty where the fp8 products (BackendOptions::hopper_fp8_products) serve a cache of this dtype,
// head dim and page size (e4m3, fp8_products_head_dim, TMA boxes); else the reason.
std::string why_no_fp8_products(DType kv_dtype, int head_dim, int page_size);

// Support as the Capabilities every caller reads.
Capabilities capabilities();

}  // namespace attnkit::hopper
