// What both `mla` kernels derive from a work item before their mainloop: the softmax constants
// (logits in log2 units, the soft-cap folded in) and each query row's visible KV range (causal,
// sliding window), with the range of tiles that no row masks.
#pragma once

#include <cmath>

#include "backends/mla/config.h"
#include "backends/mla/kernels/attend.h"

namespace attnkit::mla {

struct RowWindow {
  static constexpr float kLog2e = 1.4426950408889634f;
  static constexpr float kLn2 = 0.6931471805599453f;
  // A row's max (log2 units) moves only where a tile's exceeds it by more than kMaxSlack: P is then
  // at most 2^8 = 256 (bf16 holds it; O and the sums are f32), and O is rescaled only on tiles
  // where a row of the warp moved, not on every tile. O / l and the LSE (m + log2 l) do not depend
  // on which m the sums were taken against.
  static constexpr float kMaxSlack = 8.0f;

  bool soft_cap;
  float logit_scale;  // applied to a raw score: inside tanh with the soft-cap, else to log2 units
  float cap_log2;     // the soft-cap's factor outside tanh, in log2 units
  float exp_scale;    // a (capped) score times this is in log2 units
  int unmasked_lo, unmasked_hi;  // tiles inside [lo, hi) are visible to every row of the item

  __device__ __forceinline__ RowWindow(const AttendParams& p, const WorkItem& w)
      : heads_(p.num_qo_heads), prefix_(w.prefix), t_row0_(w.t_row0), rows_(w.rows), kv_lo_(w.kv_lo), kv_hi_(w.kv_hi),
        window_left_(p.window_left), causal_(p.causal) {
    soft_cap = p.logits_soft_cap > 0.0f;
    logit_scale = soft_cap ? p.sm_scale / p.logits_soft_cap : p.sm_scale * kLog2e;
    cap_log2 = p.logits_soft_cap * kLog2e;
    exp_scale = soft_cap ? 1.0f : logit_scale;
    const int pos_first = w.prefix + w.t_row0 / p.num_qo_heads;
    const int pos_last = w.prefix + (w.t_row0 + w.rows - 1) / p.num_qo_heads;
    unmasked_hi = p.causal ? min(w.kv_hi, pos_first + 1) : w.kv_hi;
    unmasked_lo = p.window_left >= 0 ? max(w.kv_lo, pos_last - p.window_left) : w.kv_lo;
  }

  // A raw score soft-capped, in log2 units (only where soft_cap).
  __device__ __forceinline__ float cap(float s) const { return cap_log2 * tanhf(s * logit_scale); }

  // Whether any row of the item masks a token of the tile starting at n0.
  __device__ __forceinline__ bool tile_masked(int n0) const { return n0 + kTileTokens > unmasked_hi || n0 < unmasked_lo; }

  // The visible tokens [lo, hi) of the item's row r (rows past its end read as its last).
  __device__ __forceinline__ int2 visible(int r) const {
    const int pos = prefix_ + (t_row0_ + min(r, rows_ - 1)) / heads_;
    const int hi = causal_ ? min(kv_hi_, pos + 1) : kv_hi_;
    const int lo = window_left_ >= 0 ? max(kv_lo_, pos - window_left_) : kv_lo_;
    return make_int2(lo, hi);
  }

 private:
  int heads_, prefix_, t_row0_, rows_, kv_lo_, kv_hi_, window_left_;
  bool causal_;
};

}  // namespace attnkit::mla
