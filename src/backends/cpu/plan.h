// The `cpu` backend's plan: from the batch alone, the list of work units (a block of query rows
// against a range of keys), ordered longest first, and which split-KV partials are merged into which rows.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/spec.h"
#include "backends/cpu/kernels/params.h"

namespace attnkit::cpu {

enum class KernelKind {
  rows,   // extend, mixed, MLA, custom masks: rows of one KV group across the SIMD lanes
  heads,  // decode: every head of one token, keys converted in registers
};

// What of a layer's spec a plan depends on; layers with equal shapes share one plan.
struct PlanShape {
  bool mla = false;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim_qk = 0;
  int head_dim_vo = 0;
  bool causal = true;
  int window_left = -1;

  bool operator==(const PlanShape&) const = default;
};
PlanShape plan_shape(const AttentionSpec& spec);

struct PlannedUnit {
  UnitWork work;
  int64_t partial_row = -1;  // -1: the unit writes its rows to the output; else its first partial row
  int64_t cost = 0;          // keys x rows, the unit's share of the work
};

// A slice of one split unit's rows, merged as one task: a long request's merge is shared by the
// threads instead of running on one while the others wait.
struct MergeGroup {
  UnitWork rows;                // the rows merged (kv range: all parts together)
  int64_t first_partial_row = 0;
  int num_parts = 0;            // part k starts at first_partial_row + k * part_stride_rows
  int part_stride_rows = 0;     // rows of the whole split unit
};

struct Plan {
  KernelKind kernel = KernelKind::rows;
  int kv_tile = 64;                  // keys a rows-kernel tile holds
  int kv_chunk = 0;                  // split-KV chunk length; 0: nothing is split
  std::vector<PlannedUnit> units;    // in decreasing cost: handed out in this order, longest first
  std::vector<MergeGroup> merges;
  int64_t partial_rows = 0;          // rows of the partial buffers ([partial_rows, head_dim_vo] and lse)
};

// Keys [first, second) that query positions [pos_lo, pos_hi] of a request of kv_len keys can see
// at all; the kernels mask inside this range.
std::pair<int, int> visible_keys(const PlanShape& shape, int kv_len, int pos_lo, int pos_hi, bool custom_mask);

// The split-KV chunk length for natural units of the given key spans; 0 when splitting does not pay.
int choose_kv_chunk(const std::vector<int>& spans, int kv_tile);

// Keys a tile of the rows kernel holds for this head dim: the plan's choice, and what the
// backend sizes each thread's scratch for.
int rows_kv_tile(int head_dim_qk);

// `simd_lanes`: f32 lanes of the kernels' SIMD target; the heads kernel needs head dims that are multiples of twice that.
Plan make_plan(const ForwardBatch& batch, const PlanShape& shape, int simd_lanes);

}  // namespace attnkit::cpu
