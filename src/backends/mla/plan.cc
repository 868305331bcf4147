#include "backends/mla/plan.h"

#include <algorithm>


namespace attnkit::mla {

Plan make_plan(const ForwardBatch& batch, const PlanShape& shape) {
  const int heads = shape.num_qo_heads;
  Plan plan;
  int max_qo_len = 0;
  int64_t row_tiles = 0;
  for (int i = 0; i < batch.batch_size(); ++i) max_qo_len = std::max(max_qo_len, batch.qo_len(i));
  plan.tile_rows = tile_rows_for(max_qo_len * heads, shape.fp8_latent);
  const int tile_rows = plan.tile_rows;
  for (int i = 0; i < batch.batch_size(); ++i) row_tiles += (int64_t{batch.qo_len(i)} * heads + tile_rows - 1) / tile_rows;
  std::vector<WorkItem> tiles;
  tiles.reserve(static_cast<size_t>(row_tiles));
  for (int i = 0; i < batch.batch_size(); ++i) {
    const int qo_len = batch.qo_len(i);
    const int kv_len = batch.kv_len(i);
    const int prefix = kv_len - qo_len;
    const int rows = qo_len * heads;
    for (int r0 = 0; r0 < rows; r0 += tile_rows) {
      WorkItem w{};
      w.q_row0 = batch.qo_indptr[static_cast<size_t>(i)] * heads + r0;
      w.t_row0 = r0;
      w.rows = std::min(tile_rows, rows - r0);
      w.page_begin = batch.kv_page_indptr[static_cast<size_t>(i)];
      w.prefix = prefix;
      const int t_min = r0 / heads;
      const int t_max = (r0 + w.rows - 1) / heads;
      w.kv_hi = shape.causal ? std::min(kv_len, prefix + t_max + 1) : kv_len;
      w.kv_lo = shape.window_left >= 0 ? std::max(0, prefix + t_min - shape.window_left) : 0;
      w.n0 = w.kv_lo / kTileTokens * kTileTokens;
      w.num_tiles = w.kv_hi > w.kv_lo ? (w.kv_hi - w.n0 + kTileTokens - 1) / kTileTokens : 0;
      w.partial = -1;
      plan.total_tiles += w.num_tiles;
      tiles.push_back(w);
    }
  }
  // One wave: a split holds at most total / num_ctas tiles (at least 2, so a split is worth its
  // partial's write and merge); a row tile longer than that is cut into pieces of exactly that
  // many and a shorter rest. Run longest first, the short pieces fill in behind the long ones.
  const int64_t per_cta = (plan.total_tiles + shape.num_ctas - 1) / std::max(1, shape.num_ctas);
  const int chunk = static_cast<int>(std::max<int64_t>(2, per_cta));
  // At most one piece a row tile beyond its full ones, and at most num_ctas full ones in all.
  std::vector<WorkItem> pieces;
  pieces.reserve(static_cast<size_t>(row_tiles + std::max(1, shape.num_ctas)));
  plan.merges.reserve(static_cast<size_t>(row_tiles));
  for (const WorkItem& t : tiles) {
    const int splits = std::max(1, (t.num_tiles + chunk - 1) / chunk);
    if (splits == 1) {
      pieces.push_back(t);
      continue;
    }
    const int each = chunk;
    MergeItem m{t.q_row0, t.rows, plan.num_partials, 0};
    for (int s = 0; s * each < t.num_tiles; ++s) {
      WorkItem w = t;
      w.n0 = t.n0 + s * each * kTileTokens;
      w.num_tiles = std::min(each, t.num_tiles - s * each);
      w.kv_lo = std::max(t.kv_lo, w.n0);
      w.kv_hi = std::min(t.kv_hi, w.n0 + w.num_tiles * kTileTokens);
      w.partial = plan.num_partials++;
      ++m.num_splits;
      pieces.push_back(w);
    }
    plan.merges.push_back(m);
  }
  // Longest first, ties in plan order: a stable counting sort, every piece holding 0..chunk tiles.
  std::vector<int> starts(static_cast<size_t>(chunk) + 2, 0);
  for (const WorkItem& w : pieces) ++starts[static_cast<size_t>(chunk - w.num_tiles) + 1];
  for (size_t k = 1; k < starts.size(); ++k) starts[k] += starts[k - 1];
  plan.work.resize(pieces.size());
  for (const WorkItem& w : pieces) plan.work[static_cast<size_t>(starts[static_cast<size_t>(chunk - w.num_tiles)]++)] = w;
  return plan;
}

}  // namespace attnkit::mla
