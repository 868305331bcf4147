// How the mma_tile kernel's work is cut, on the host, once per batch and tile shape: each request's
// GQA-packed query rows in blocks of the tile's rows, each block over the KV range its rows can see
// (causal and window bounds applied here, so fully masked tiles are never loaded), and long ranges
// split across CTAs (split-KV) where the blocks alone would leave SMs idle; the splits' partials are
// joined by the template's merge kernel. Host-only: tested without a GPU.
#pragma once

#include <cstdint>
#include <vector>

namespace attnkit::jit {

struct WorkRequest {
  int prefix = 0;  // tokens already cached before this batch's
  int q_len = 0;   // new tokens
};

struct WorkShape {
  int group = 1;          // query heads a KV head: rows = q_len x group
  int block_m = 64;       // rows a block
  int block_n = 64;       // keys a tile: splits are whole tiles
  bool causal = true;
  int window_left = -1;   // keys a query sees before itself (-1: all)
  int num_kv_heads = 1;   // CTAs a block: one per KV head
  int target_ctas = 132;  // CTAs that fill the GPU once (SMs x CTAs an SM holds)
};

// The layouts the template reads (kernels/mma_tile.h): items [n][8] and merges [n][8].
struct WorkPlan {
  static constexpr int kStride = 8;
  std::vector<int32_t> items;   // request, first row, KV begin, KV end, partial row (-1: direct), first tile, 0...
  std::vector<int32_t> merges;  // request, first row, rows, splits, first partial row, 0...
  int partial_rows = 0;         // rows of fp32 partials (each x KV heads x head_dim_vo)
  int64_t tiles = 0;            // K/V tiles of all items: the tile mask's entries (each x KV heads)
  int num_items() const { return static_cast<int>(items.size()) / kStride; }
  int num_merges() const { return static_cast<int>(merges.size()) / kStride; }
};

// Items are ordered longest KV range first (causal blocks differ), so the last wave is short.
WorkPlan plan_work(const std::vector<WorkRequest>& requests, const WorkShape& shape);

}  // namespace attnkit::jit
