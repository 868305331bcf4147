// Normalising, sink handling and output rounding for the `cpu` kernels, plus the split-KV merge,
// which reuses the core's merge_states so that every backend merges by the same formula.
#include "backends/cpu/kernels/epilogue.h"

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "attnkit/merge.h"

namespace attnkit::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Round to nearest even, as float_to_bf16_bits does, inlined: every output element goes through it.
inline uint16_t to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}

// out[token, head, :] = o[:] * scale in the output dtype.
void store_row(const AttendParams& p, int64_t token, int head, const float* o, float scale) {
  const int dv = p.head_dim_vo;
  const int64_t base = (token * p.num_qo_heads + head) * int64_t{dv};
  switch (p.out_dtype) {
    case DType::f32: {
      float* dst = static_cast<float*>(p.out) + base;
      for (int e = 0; e < dv; ++e) dst[e] = o[e] * scale;
      break;
    }
    case DType::bf16: {
      uint16_t* dst = static_cast<uint16_t*>(p.out) + base;
      for (int e = 0; e < dv; ++e) dst[e] = to_bf16(o[e] * scale);
      break;
    }
    default:
      for (int e = 0; e < dv; ++e) store_from_float(p.out, p.out_dtype, base + e, o[e] * scale);
      break;
  }
}

// The row's natural-log LSE, sinks left out, where the caller asked for it (-inf: no key seen).
inline void store_lse(const AttendParams& p, int64_t token, int head, float lse) {
  if (p.lse != nullptr) p.lse[token * p.num_qo_heads + head] = lse;
}

// The sink's share of the denominator, exp(sink - m), for a row whose max logit is m.
inline float sink_term(const AttendParams& p, int head, float m) {
  if (p.sinks == nullptr || m == kNegInf) return 0.0f;
  return std::exp(p.sinks[head] - m);
}

}  // namespace

void write_rows(const AttendParams& p, const UnitWork& u, const UnitState& s) {
  for (int r = 0; r < u.num_rows(); ++r) {
    const int head = u.head(r);
    const float total = s.l[r] + sink_term(p, head, s.m[r]);
    // A fully masked row has nothing to average: zeros, never 0/0.
    const float scale = total > 0.0f ? p.v_scale / total : 0.0f;
    store_row(p, u.token(p, r), head, s.o + r * s.o_stride, scale);
    store_lse(p, u.token(p, r), head, s.l[r] > 0.0f ? s.m[r] + std::log(s.l[r]) : kNegInf);
  }
}

void write_partial(const AttendParams& p, const UnitWork& u, const UnitState& s, float* part_o, float* part_lse) {
  const int dv = p.head_dim_vo;
  for (int r = 0; r < u.num_rows(); ++r) {
    const float l = s.l[r];
    const float scale = l > 0.0f ? p.v_scale / l : 0.0f;
    const float* o = s.o + r * s.o_stride;
    float* dst = part_o + int64_t{r} * dv;
    for (int e = 0; e < dv; ++e) dst[e] = o[e] * scale;
    part_lse[r] = l > 0.0f ? s.m[r] + std::log(l) : kNegInf;
  }
}

void merge_partials(const AttendParams& p, const UnitWork& u, int num_parts, int part_stride_rows,
                    const float* part_o, const float* part_lse, float* scratch) {
  const int rows = u.num_rows();
  const int dv = p.head_dim_vo;
  std::vector<AttentionState> parts;
  parts.reserve(static_cast<size_t>(num_parts));
  for (int k = 0; k < num_parts; ++k) {
    const int64_t row0 = int64_t{k} * part_stride_rows;
    parts.push_back({TensorView(const_cast<float*>(part_o + row0 * dv), DType::f32, Device::cpu, {rows, 1, dv}),
                     TensorView(const_cast<float*>(part_lse + row0), DType::f32, Device::cpu, {rows, 1})});
  }
  float* merged_o = scratch;
  float* merged_lse = scratch + int64_t{rows} * dv;
  merge_states(parts, {TensorView(merged_o, DType::f32, Device::cpu, {rows, 1, dv}),
                       TensorView(merged_lse, DType::f32, Device::cpu, {rows, 1})});
  for (int r = 0; r < rows; ++r) {
    // o already holds sum exp(s - lse) v / sum exp(s - lse); the sink only grows the denominator:
    // o * e^lse / (e^lse + e^sink) = o / (1 + e^(sink - lse)). An empty row stays zero.
    const int head = u.head(r);
    const float scale = 1.0f / (1.0f + sink_term(p, head, merged_lse[r]));
    store_row(p, u.token(p, r), head, merged_o + int64_t{r} * dv, scale);
    store_lse(p, u.token(p, r), head, merged_lse[r]);
  }
}

}  // namespace attnkit::cpu
