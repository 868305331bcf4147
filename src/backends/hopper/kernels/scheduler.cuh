// The `hopper` extend kernel's persistent tile scheduler: CTA c takes the works persistent_work
// (extend.h) names, a snake over the planner's list (longest first, planned/plan.cc) crossed with
// the KV heads, so every role of the CTA walks the same sequence; and what each tile covers: its GQA-packed rows of one
// request and KV head, and the KV positions [kv_lo, kv_hi) those rows may see.
#pragma once

#include "backends/hopper/kernels/extend.h"

namespace attnkit::hopper {

struct Tile {
  int req, kv_head, group;
  int qo_start, qo_len, page_begin, kv_len, prefix;
  int row0, rows_here;       // packed rows [row0, row0 + rows_here) of the request
  int pos_min, pos_max;      // positions of its first and last real rows
  int kv_lo, kv_hi;          // kv_lo a multiple of the KV tile, so tiles start on page boundaries
  int num_kv_tiles;
};

__device__ __forceinline__ int num_work(const ExtendParams& p) { return p.num_work_items * p.num_kv_heads; }
// This CTA's k-th work: for (int k = 0, w = cta_work(0); w < num_work(p); w = cta_work(++k)).
__device__ __forceinline__ int cta_work(int k) {
  return persistent_work(k, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x));
}

// Work w as a tile; false where its q tile holds no row (nothing to do).
template <typename C>
__device__ __forceinline__ bool load_tile(const ExtendParams& p, int w, Tile& t) {
  constexpr int kN = C::kBlockN;
  const planned::PrefillWorkItem item = p.work[w / p.num_kv_heads];
  t.kv_head = w % p.num_kv_heads;
  t.req = item.request_idx;
  t.group = p.num_qo_heads / p.num_kv_heads;
  t.qo_start = p.qo_indptr[t.req];
  t.qo_len = p.qo_indptr[t.req + 1] - t.qo_start;
  t.page_begin = p.page_begin[t.req];
  const int num_pages = p.kv_page_indptr[t.req + 1] - p.kv_page_indptr[t.req];
  t.kv_len = num_pages == 0 ? 0 : (num_pages - 1) * p.page_size + p.kv_last_page_len[t.req];
  t.prefix = p.prefix_lens[t.req];
  t.row0 = item.qo_tile_idx * p.tile_rows;
  t.rows_here = min(p.tile_rows, t.qo_len * t.group - t.row0);
  if (t.rows_here <= 0) return false;
  t.pos_min = t.prefix + t.row0 / t.group;
  t.pos_max = t.prefix + (t.row0 + t.rows_here - 1) / t.group;
  t.kv_hi = p.causal ? min(t.kv_len, t.pos_max + 1) : t.kv_len;
  const int lo = p.window_left >= 0 ? max(0, t.pos_min - p.window_left) : 0;
  t.kv_lo = lo / kN * kN;
  t.num_kv_tiles = t.kv_hi > t.kv_lo ? (t.kv_hi - t.kv_lo + kN - 1) / kN : 0;
  return true;
}

}  // namespace attnkit::hopper
