// The host scheduler's extend work list and the upload buffer's layout (the decode plan is
// plan_decode.cc's). No CUDA here; graph_state.cc moves the bytes.
#include "backends/planned/plan.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "attnkit/error.h"
#include "backends/planned/page_table.h"

namespace attnkit::planned {

int count_prefill_items(const ForwardBatch& batch, const PlanShape& shape) {
  const int rows = shape.prefill_rows;
  ATTNKIT_CHECK(rows > 0, "planned plan: the extend tile has ", rows, " rows");
  const int group = shape.group_size();
  int count = 0;
  for (int i = 0; i < batch.batch_size(); ++i) {
    const int qo_len = batch.qo_len(i);
    if (qo_len >= 2) count += (qo_len * group + rows - 1) / rows;
  }
  return count;
}

int plan_prefill(const ForwardBatch& batch, const PlanShape& shape, std::span<PrefillWorkItem> out) {
  const int rows = shape.prefill_rows;
  const int group = shape.group_size();
  struct Tile {
    int request, tile;
    int64_t cost;  // KV positions its last row sees under a causal mask: a proxy for its time
  };
  std::vector<Tile> tiles;
  for (int i = 0; i < batch.batch_size(); ++i) {
    if (batch.qo_len(i) < 2) continue;
    const int64_t packed = int64_t{batch.qo_len(i)} * group;
    const int count = static_cast<int>((packed + rows - 1) / rows);
    for (int t = 0; t < count; ++t) {
      const int64_t last_row = std::min<int64_t>(packed, int64_t{t + 1} * rows) - 1;
      tiles.push_back({i, t, batch.prefix_lens[i] + last_row / group + 1});
    }
  }
  ATTNKIT_CHECK(tiles.size() <= out.size(), "planned plan: ", tiles.size(), " extend items, more than the ",
                out.size(), " planned for");
  // Longest first: the last tiles to start (on a persistent grid, the last each CTA takes) are the
  // short ones, so the tail is short.
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.cost > b.cost; });
  for (size_t k = 0; k < tiles.size(); ++k) out[k] = {tiles[k].request, tiles[k].tile, 0, -1, -1};
  return static_cast<int>(tiles.size());
}

int decode_grid_ctas(int slots, int num_kv_heads) {
  ATTNKIT_CHECK(slots >= 1 && num_kv_heads >= 1, "planned plan: decode grid of ", slots, " slots for ", num_kv_heads,
                " KV heads");
  for (int reps = num_kv_heads; reps > 1; --reps) {
    if (num_kv_heads % reps != 0) continue;
    const int ctas = slots - slots % reps;
    if (50 * static_cast<int64_t>(ctas) >= 49 * static_cast<int64_t>(slots)) return ctas;  // at most 2% idle
  }
  return slots;
}

int plan_head_reps(const PlanShape& grid) {
  return std::max(1, std::gcd(grid.num_kv_heads, grid.num_ctas));
}

PlanShape share_shape(const PlanShape& grid, int reps) {
  ATTNKIT_CHECK(reps >= 1 && grid.num_kv_heads % reps == 0 && grid.num_ctas % reps == 0, "planned plan: ", reps,
                " shares must divide num_kv_heads (", grid.num_kv_heads, ") and num_ctas (", grid.num_ctas, ")");
  PlanShape s = grid;
  s.num_kv_heads /= reps;
  s.num_qo_heads /= reps;
  s.num_ctas /= reps;
  return s;
}

bool PlanCapacity::fits(const PlanCapacity& need) const {
  return need.batch_size <= batch_size && need.num_pages <= num_pages && need.num_tokens <= num_tokens &&
         need.mask_bytes <= mask_bytes && need.decode_items <= decode_items && need.prefill_items <= prefill_items;
}

PlanLayout make_layout(const PlanCapacity& c, const PlanShape& shape, int num_variants) {
  ATTNKIT_CHECK(num_variants >= 1 && num_variants <= PlanLayout::kMaxVariants, "planned plan: the model has ",
                num_variants, " distinct window_left values, at most ", PlanLayout::kMaxVariants, " are supported");
  PlanLayout l;
  size_t off = 0;
  auto section = [&](size_t bytes) {
    const size_t at = off;
    off = (off + bytes + 15) / 16 * 16;  // 16-byte aligned: items are read as int4
    return at;
  };
  for (int v = 0; v < num_variants; ++v) {
    l.cta_item_indptr[v] = section((static_cast<size_t>(shape.num_ctas) + 1) * 4);
    l.num_merges[v] = section(4);
    l.merges[v] = section(static_cast<size_t>(max_decode_merges(shape)) * sizeof(DecodeMergeItem));
    l.decode_items[v] = section(static_cast<size_t>(c.decode_items) * sizeof(DecodeWorkItem));
  }
  l.prefill_items = section(static_cast<size_t>(c.prefill_items) * sizeof(PrefillWorkItem));
  const size_t b = static_cast<size_t>(c.batch_size);
  l.qo_indptr = section((b + 1) * 4);
  l.kv_page_indptr = section((b + 1) * 4);
  l.kv_last_page_len = section(b * 4);
  l.prefix_lens = section(b * 4);
  l.page_begin = section(b * 4);
  l.out_cache_loc = section(static_cast<size_t>(c.num_tokens) * 8);
  l.custom_mask_indptr = section(c.mask_bytes > 0 ? (b + 1) * 8 : 0);
  l.custom_mask = section(static_cast<size_t>(c.mask_bytes));
  off = (off + 63) / 64 * 64;
  l.page_table_entries = page_table_entries(c);
  l.kv_page_indices = section(l.page_table_entries * 4);
  l.total_bytes = off;
  return l;
}

PlanCapacity capacity_for(const ForwardBatch& batch, const PlanShape& shape) {
  PlanCapacity c;
  c.batch_size = batch.batch_size();
  c.num_pages = static_cast<int>(batch.kv_page_indices.size());
  c.num_tokens = batch.num_tokens();
  c.mask_bytes = static_cast<int64_t>(batch.custom_mask.size());
  c.decode_items = max_decode_items(c.batch_size, shape);
  c.prefill_items = count_prefill_items(batch, shape);
  return c;
}

void write_batch_arrays(const ForwardBatch& batch, const PlanLayout& l, std::byte* staging) {
  auto put = [&](size_t offset, const auto& v) {
    if (!v.empty()) std::memcpy(staging + offset, v.data(), v.size() * sizeof(v[0]));
  };
  put(l.qo_indptr, batch.qo_indptr);
  put(l.kv_page_indptr, batch.kv_page_indptr);
  put(l.kv_last_page_len, batch.kv_last_page_len);
  put(l.prefix_lens, batch.prefix_lens);
  put(l.out_cache_loc, batch.out_cache_loc);
  if (!batch.custom_mask.empty()) {
    put(l.custom_mask_indptr, batch.custom_mask_indptr);
    put(l.custom_mask, batch.custom_mask);
  }
}

DecodePlanView decode_view(const PlanLayout& l, const PlanCapacity& c, const PlanShape& shape, int v,
                           std::byte* staging) {
  DecodePlanView view;
  view.cta_item_indptr = {reinterpret_cast<int32_t*>(staging + l.cta_item_indptr[v]),
                          static_cast<size_t>(shape.num_ctas) + 1};
  view.items = {reinterpret_cast<DecodeWorkItem*>(staging + l.decode_items[v]), static_cast<size_t>(c.decode_items)};
  view.merges = {reinterpret_cast<DecodeMergeItem*>(staging + l.merges[v]),
                 static_cast<size_t>(max_decode_merges(shape))};
  view.num_merges = reinterpret_cast<int32_t*>(staging + l.num_merges[v]);
  return view;
}

void copy_decode_plan(const PlanLayout& l, const PlanShape& shape, int v, const DecodePlanStats& st,
                      const std::byte* from, std::byte* to) {
  auto copy = [&](size_t offset, size_t bytes) { std::memcpy(to + offset, from + offset, bytes); };
  copy(l.cta_item_indptr[v], (static_cast<size_t>(shape.num_ctas) + 1) * sizeof(int32_t));
  copy(l.num_merges[v], sizeof(int32_t));
  copy(l.merges[v], static_cast<size_t>(st.num_merges) * sizeof(DecodeMergeItem));
  copy(l.decode_items[v], static_cast<size_t>(st.num_items) * sizeof(DecodeWorkItem));
}

}  // namespace attnkit::planned
