#include "backends/jit/work.h"

#include <algorithm>

namespace attnkit::jit {

namespace {

struct Block {
  int request, row0, rows, lo, hi;
};

// Keys per split: at least kMinSplitKeys (a split's partial costs a write and a read of O), and
// enough that the splits of every block fill target_ctas about once.
constexpr int kMinSplitKeys = 256;

}  // namespace

WorkPlan plan_work(const std::vector<WorkRequest>& requests, const WorkShape& shape) {
  std::vector<Block> blocks;
  int64_t keys = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    const WorkRequest& q = requests[r];
    const int rows = q.q_len * shape.group;
    const int kv_len = q.prefix + q.q_len;
    for (int row0 = 0; row0 < rows; row0 += shape.block_m) {
      const int n = std::min(shape.block_m, rows - row0);
      const int first = q.prefix + row0 / shape.group, last = q.prefix + (row0 + n - 1) / shape.group;
      const int lo = shape.window_left >= 0 ? std::max(0, first - shape.window_left) : 0;
      const int hi = shape.causal ? std::min(kv_len, last + 1) : kv_len;
      blocks.push_back({static_cast<int>(r), row0, n, lo, std::max(lo, hi)});
      keys += std::max(0, hi - lo);
    }
  }
  const int64_t ctas = static_cast<int64_t>(blocks.size()) * shape.num_kv_heads;
  int64_t split_keys = 0;  // 0: no block is split
  if (ctas > 0 && ctas < shape.target_ctas) {
    const int64_t per_cta = keys * shape.num_kv_heads / std::max<int64_t>(1, shape.target_ctas);
    split_keys = std::max<int64_t>(kMinSplitKeys, (per_cta + shape.block_n - 1) / shape.block_n * shape.block_n);
    // Each block's splits round up: longer splits until every CTA fits one wave (16 x 8192 at 264
    // slots: 3 splits, 384 CTAs, 1.45 waves, before; 2 splits, 256 CTAs, after).
    const auto count = [&](int64_t sk) {
      int64_t n = 0;
      for (const Block& b : blocks) n += std::max<int64_t>(1, (b.hi - b.lo + sk - 1) / sk);
      return n * shape.num_kv_heads;
    };
    while (count(split_keys) > shape.target_ctas) split_keys += shape.block_n;
  }

  struct Item {
    int32_t v[WorkPlan::kStride];
  };
  std::vector<Item> items;
  WorkPlan plan;
  for (const Block& b : blocks) {
    const int len = b.hi - b.lo;
    const int splits = split_keys > 0 && len > split_keys ? static_cast<int>((len + split_keys - 1) / split_keys) : 1;
    if (splits == 1) {
      items.push_back({{b.request, b.row0, b.lo, b.hi, -1, 0, 0, 0}});
      continue;
    }
    const int base = plan.partial_rows;
    const int64_t per = ((len + splits - 1) / splits + shape.block_n - 1) / shape.block_n * shape.block_n;
    int used = 0;
    for (int s = 0; s < splits; ++s) {
      const int lo = static_cast<int>(std::min<int64_t>(b.hi, b.lo + s * per));
      const int hi = static_cast<int>(std::min<int64_t>(b.hi, lo + per));
      items.push_back({{b.request, b.row0, lo, hi, base + s * shape.block_m, 0, 0, 0}});
      ++used;
    }
    plan.partial_rows += used * shape.block_m;
    const int32_t merge[WorkPlan::kStride] = {b.request, b.row0, b.rows, used, base, 0, 0, 0};
    plan.merges.insert(plan.merges.end(), merge, merge + WorkPlan::kStride);
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.v[3] - a.v[2] > b.v[3] - b.v[2]; });
  for (Item& it : items) {
    it.v[5] = static_cast<int32_t>(plan.tiles);
    plan.tiles += (it.v[3] - it.v[2] + shape.block_n - 1) / shape.block_n;
    plan.items.insert(plan.items.end(), it.v, it.v + WorkPlan::kStride);
  }
  return plan;
}

}  // namespace attnkit::jit
