// The `mla` backend's kernels, for decode, speculative-verify and extend rows alike: a CTA takes
// one work item (plan.h: up to 64 query rows of one request) against its paged latent history,
// K tiles by TMA, both products on wgmma; the combine kernel joins a row tile's splits.
//   attend_kernel.cuh: 64-row tiles, bf16 cache.
//   narrow_kernel.cuh: 16- or 32-row tiles computed transposed (16-head decode), bf16 or
//     fp8_blocked cache.
// The tensor maps, launchers and combine are attend.cu.
#pragma once

#include <cstdint>

#include "attnkit/layer_params.h"
#include "backends/mla/plan.h"
#include "cuda/tensor_map.h"

typedef struct CUstream_st* cudaStream_t;

namespace attnkit::mla {

// The latent pool of one layer as a 2-D tensor: bf16 [num_slots, 576], read in
// 64 x min(page_size, 64) boxes with 128-byte swizzle; fp8_blocked [num_slots, 656 bytes], read
// in boxes of min(page_size, 64) whole slots, unswizzled.
using LatentMap = cuda::TensorMap;
LatentMap make_latent_map(const void* pool, int64_t num_slots, int page_size, bool fp8_latent);

struct AttendParams : LayerParams {
  const void* q = nullptr;  // [num_tokens * num_qo_heads, 576] bf16, rows contiguous
  void* out = nullptr;      // [num_tokens * num_qo_heads, 512] bf16
  const WorkItem* work = nullptr;
  int num_work = 0;       // the grid: work items, or a bound on them (a graph's launch)
  // [2] on the device: the work items and merges of the batch planned last; CTAs past them exit,
  // so a captured launch of a fixed grid serves any later plan within its bounds.
  const int32_t* counts = nullptr;
  const int32_t* page_indices = nullptr;  // the batch's kv_page_indices, on the device
  float* partial_o = nullptr;    // [num_partials, 64, 512]: split items' normalised rows
  float* partial_lse = nullptr;  // [num_partials, 64] natural log
  float* lse = nullptr;          // [num_tokens * num_qo_heads] natural log, -inf for no key; null: not wanted
  const MergeItem* merges = nullptr;
  int num_merges = 0;     // the combine's grid: merges, or a bound on them
  int tile_rows = kTileRows;  // the plan's row tile: picks the kernel
  bool fp8_latent = false;    // the cache is LatentFormat::fp8_blocked
};

void launch_attend(const AttendParams& p, const LatentMap& map, cudaStream_t stream);

}  // namespace attnkit::mla
