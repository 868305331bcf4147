// The `hopper` extend kernel's host interface: its params (planned's extend params, which carry
// the layer, the batch arrays and the planner's work list, plus the tile's row count and the
// token count the Q map needs), the tensor maps it loads through, and the launcher. The kernel is
// kernel.cuh; the instantiations and the dispatch are extend.cu.
#pragma once

#include <cstdint>

#include "backends/planned/kernels/prefill.h"
#include "cuda/tensor_map.h"

namespace attnkit::hopper {

struct ExtendParams : planned::PrefillParams {
  int tile_rows = 0;   // GQA-packed rows of a work item: tile_rows(kBlockM, group) (config.h)
  int num_tokens = 0;  // q's first dimension
  // K/V rows gathered with cp.async even where pages allow TMA boxes (pages under
  // Support::min_tma_page_size slots are gathered whatever this says).
  bool gather_kv = false;
  // An e4m3 cache multiplied on e4m3 tensor cores (q quantised a row at a time; d128, pages of
  // Support::min_tma_page_size slots or more) instead of dequantised to q's type as it loads.
  bool fp8_products = false;
};

// The producer's ways of filling a K/V stage (producer.cuh).
enum class KvLoad {
  tma_boxes,    // TMA boxes of whole page pieces: pages of 8 slots or more
  gather,       // rows copied with cp.async by the producer warpgroup: any page size
  gather_e4m3,  // rows of an e4m3 cache loaded by the producer warpgroup, dequantised to T, stored
  tma_fp8,      // an e4m3 cache's raw bytes as TMA boxes, the products on e4m3 (d128): q quantised a
                // row at a time by the consumers, V transposed to V^T by producer warps 1-3
};

// Q [num_tokens, num_qo_heads, D] as 4-D (D, group, kv_heads, tokens): one box is the tile's
// tokens x group rows of one KV head. K and V pools [num_slots, kv_heads, D] as 3-D: one box is
// min(page_size, kMaxBoxRows = 64) slots of one page and head. Boxes are 128 bytes wide (64 16-bit elements,
// or 128 e4m3 bytes), 128-byte swizzled: the layout wgmma reads.
struct ExtendMaps {
  cuda::TensorMap q, k, v;
};

// How the kernel loads K/V (config.cuh's KvLoad): an e4m3 cache dequantised row by row, or as TMA
// boxes of raw bytes with fp8 products; 16-bit pages under Support::min_tma_page_size slots (or
// any, when asked) gathered; larger ones as TMA boxes.
KvLoad kv_load(DType kv_dtype, int page_size, bool gather_asked, bool fp8_products);
KvLoad kv_load(const ExtendParams& p);
// The q tile of this head dim and load (the planner's rows: tile_rows(block_m, group)).
int extend_block_m(int head_dim, KvLoad load);
// One layer's K or V pool [num_slots, num_kv_heads, head_dim] in `dtype`: made once, the pools
// do not move. Q's map is made for each call (q_map), q being another tensor every time.
cuda::TensorMap make_pool_map(const void* pool, DType dtype, int head_dim, int num_kv_heads, int64_t num_slots,
                              int page_size);
cuda::TensorMap make_q_map(const ExtendParams& p);
// Throws attnkit::Error naming the first unsupported field. Then enqueues the kernel on `stream`
// over at most one CTA an SM (persistent); nothing to do when num_work_items is 0.
void check_extend_params(const ExtendParams& p);
void launch_extend(const ExtendParams& p, const ExtendMaps& maps, cudaStream_t stream);

// The persistent kernel's k-th work for CTA `cta` of `grid`: rounds of `grid` works, walked
// forward in even rounds and backward in odd ones (a snake). The planner's list is longest first,
// so each CTA's total stays within about one work of the others'; plain round robin hands CTA 0
// the longest work of every round (causal 1 x 8192, llama3-8b heads, 132 CTAs: the busiest CTA 6%
// over the mean, against 0.6% with the snake). A CTA's works ascend: it stops at the first past
// the list.
#if defined(__CUDACC__)
__host__ __device__
#endif
constexpr int persistent_work(int k, int cta, int grid) {
  return k * grid + ((k & 1) != 0 ? grid - 1 - cta : cta);
}

}  // namespace attnkit::hopper
