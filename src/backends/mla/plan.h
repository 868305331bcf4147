// The `mla` backend's host scheduler: once per batch, before layer 0, it cuts every request's
// query rows (heads x new tokens) into row tiles of the kernel it picks (config.h: tile_rows_for), each tile's visible KV range into 64-token
// tiles, and splits long ranges so that the work fills every SM in one wave; splits of one row
// tile are joined by the combine kernel. Every layer reuses the plan. Host-only, no CUDA header.
#pragma once

#include <cstdint>
#include <vector>

#include "attnkit/batch.h"
#include "backends/mla/config.h"

namespace attnkit::mla {

// One CTA's work: query rows [q_row0, q_row0 + rows) of the flattened [num_tokens * num_qo_heads]
// rows (row = token * num_qo_heads + head), which are rows [t_row0, t_row0 + rows) of their
// request, against KV positions [kv_lo, kv_hi) of that request (the causal and window cut of each
// row is applied inside). The KV tiles start at n0 (kv_lo rounded down to a tile) and number
// num_tiles.
struct WorkItem {
  int32_t q_row0;
  int32_t t_row0;
  int32_t rows;
  int32_t page_begin;  // the request's first entry in kv_page_indices
  int32_t prefix;      // tokens cached before this step: new token t sits at position prefix + t
  int32_t kv_lo;
  int32_t kv_hi;
  int32_t n0;
  int32_t num_tiles;
  int32_t partial;     // -1: writes out; else the partial slot [kTileRows, kHeadDimVo] it writes
};

// The splits of one row tile, joined into out: partial slots [first_partial, + num_splits).
struct MergeItem {
  int32_t q_row0;
  int32_t rows;
  int32_t first_partial;
  int32_t num_splits;
};

struct PlanShape {
  int num_qo_heads = 0;
  bool causal = true;
  int window_left = -1;
  int num_ctas = 132;  // CTAs that run at once (one a SM)
  bool fp8_latent = false;  // the cache is LatentFormat::fp8_blocked
};

struct Plan {
  std::vector<WorkItem> work;  // longest first
  std::vector<MergeItem> merges;
  int num_partials = 0;
  int tile_rows = kTileRows;  // the row tile, which names the kernel: 16 or 32 narrow, 64 the 64-row one
  int64_t total_tiles = 0;  // 64 x 64 tiles of the batch
};

Plan make_plan(const ForwardBatch& batch, const PlanShape& shape);

}  // namespace attnkit::mla
