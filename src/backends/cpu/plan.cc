// Building the `cpu` plan: natural units per request (and KV head and row block), the split-KV
// decision, chunking, and the longest-first order. Depends on the batch and the layer shape only,
// never on the thread count, so results are the same bits on any number of cores.
#include "backends/cpu/plan.h"

#include <algorithm>

namespace attnkit::cpu {

namespace {

// Split-KV aims for this many units: enough for 64 threads, few enough that partials stay small.
constexpr int64_t kTargetUnits = 64;
// No chunk is shorter: a partial costs num_rows x head_dim_vo floats written and merged, against a
// chunk's keys read (decode, llama3-8b heads, bf16: 16 KiB of partial per 1 MiB of keys at 256).
constexpr int kMinChunk = 256;
// Rows a merge task takes (decode, llama3-8b heads: a request's 32 heads in 4 tasks).
constexpr int kMergeSliceRows = 8;
// Fixed cost of a unit in key equivalents (packing q, clearing o, the epilogue), for the ordering.
constexpr int64_t kUnitOverheadKeys = 16;

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace

PlanShape plan_shape(const AttentionSpec& spec) {
  return {spec.is_mla(), spec.num_qo_heads, spec.num_kv_heads, spec.head_dim_qk, spec.head_dim_vo, spec.causal,
          spec.window_left};
}

std::pair<int, int> visible_keys(const PlanShape& shape, int kv_len, int pos_lo, int pos_hi, bool custom_mask) {
  const int first = shape.window_left >= 0 ? std::max(0, pos_lo - shape.window_left) : 0;
  const int last = (shape.causal && !custom_mask) ? std::min(kv_len, pos_hi + 1) : kv_len;
  return {first, std::max(first, last)};
}

// Example (decode, one unit per request): 1 x 32768 keys: 32768 / 64 = 512 -> 64 chunks of 512;
// 8 x 4096: 32768 / 64 = 512 -> 8 chunks each, 64 units; 64 x 4096: already 64 units -> no split.
// A prefill of 4096 tokens (llama3-8b heads) has 1024 row-block units -> no split.
int choose_kv_chunk(const std::vector<int>& spans, int kv_tile) {
  if (static_cast<int64_t>(spans.size()) >= kTargetUnits) return 0;
  int64_t total = 0;
  int longest = 0;
  for (int s : spans) {
    total += s;
    longest = std::max(longest, s);
  }
  int chunk = std::max(kMinChunk, ceil_div(total, kTargetUnits));
  chunk = ceil_div(chunk, kv_tile) * kv_tile;
  return longest > chunk ? chunk : 0;
}

// Wide MLA latents: half the keys keep a tile's K (32 x 576 f32) in L2 beside Q^T.
int rows_kv_tile(int head_dim_qk) { return head_dim_qk <= 256 ? 64 : 32; }

Plan make_plan(const ForwardBatch& batch, const PlanShape& shape, int simd_lanes) {
  Plan plan;
  const bool any_mask = !batch.custom_mask.empty();
  const bool dims_fit = shape.head_dim_qk % (2 * simd_lanes) == 0 && shape.head_dim_vo % (2 * simd_lanes) == 0;
  plan.kernel = (!shape.mla && batch.mode == ForwardMode::decode && !any_mask && dims_fit) ? KernelKind::heads
                                                                                           : KernelKind::rows;
  plan.kv_tile = rows_kv_tile(shape.head_dim_qk);

  std::vector<UnitWork> natural;
  for (int i = 0; i < batch.batch_size(); ++i) {
    const int qo_len = batch.qo_len(i);
    if (qo_len == 0) continue;
    const int kv_len = batch.kv_len(i);
    const int prefix = batch.prefix_lens[i];
    const bool mask = batch.has_custom_mask(i);
    if (plan.kernel == KernelKind::heads) {
      const auto [first, last] = visible_keys(shape, kv_len, prefix, prefix, mask);
      natural.push_back({i, 0, shape.num_qo_heads, 0, shape.num_qo_heads, first, last});
      continue;
    }
    const int group = shape.num_qo_heads / shape.num_kv_heads;
    const int rows = qo_len * group;
    for (int kv_head = 0; kv_head < shape.num_kv_heads; ++kv_head) {
      for (int row = 0; row < rows; row += kBlockRows) {
        const int row_end = std::min(rows, row + kBlockRows);
        const auto [first, last] =
            visible_keys(shape, kv_len, prefix + row / group, prefix + (row_end - 1) / group, mask);
        natural.push_back({i, kv_head, group, row, row_end, first, last});
      }
    }
  }

  std::vector<int> spans;
  spans.reserve(natural.size());
  for (const UnitWork& w : natural) spans.push_back(w.kv_end - w.kv_begin);
  plan.kv_chunk = choose_kv_chunk(spans, plan.kv_tile);

  for (const UnitWork& w : natural) {
    const int span = w.kv_end - w.kv_begin;
    const int64_t rows = w.num_rows();
    if (plan.kv_chunk == 0 || span <= plan.kv_chunk) {
      plan.units.push_back({w, -1, (span + kUnitOverheadKeys) * rows});
      continue;
    }
    const int parts = ceil_div(span, plan.kv_chunk);
    for (int r = 0; r < rows; r += kMergeSliceRows) {
      UnitWork slice = w;
      slice.row_begin = w.row_begin + r;
      slice.row_end = w.row_begin + std::min<int>(static_cast<int>(rows), r + kMergeSliceRows);
      plan.merges.push_back({slice, plan.partial_rows + r, parts, static_cast<int>(rows)});
    }
    for (int k = 0; k < parts; ++k) {
      UnitWork part = w;
      part.kv_begin = w.kv_begin + k * plan.kv_chunk;
      part.kv_end = std::min(w.kv_end, part.kv_begin + plan.kv_chunk);
      plan.units.push_back({part, plan.partial_rows, (part.kv_end - part.kv_begin + kUnitOverheadKeys) * rows});
      plan.partial_rows += rows;
    }
  }
  std::stable_sort(plan.units.begin(), plan.units.end(),
                   [](const PlannedUnit& a, const PlannedUnit& b) { return a.cost > b.cost; });
  return plan;
}

}  // namespace attnkit::cpu
