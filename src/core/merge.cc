// merge_states on the CPU: the log-sum-exp merge of partial attention outputs.
#include "attnkit/merge.h"

#include <cmath>
#include <limits>

#include "attnkit/error.h"

namespace attnkit {

void merge_states(const std::vector<AttentionState>& parts, const AttentionState& out) {
  ATTNKIT_CHECK(out.o.rank == 3 && out.o.dtype == DType::f32 && out.o.device == Device::cpu,
                "merge_states: out.o must be f32 [num_tokens, num_heads, head_dim] on cpu, got ", out.o.describe());
  const int64_t rows = out.o.dim(0) * out.o.dim(1);
  const int64_t dim = out.o.dim(2);
  ATTNKIT_CHECK(out.lse.dtype == DType::f32 && out.lse.numel() == rows, "merge_states: out.lse must be f32 [",
                out.o.dim(0), ", ", out.o.dim(1), "], got ", out.lse.describe());
  for (size_t p = 0; p < parts.size(); ++p) {
    ATTNKIT_CHECK(parts[p].o.dtype == DType::f32 && parts[p].o.numel() == rows * dim && parts[p].lse.numel() == rows,
                  "merge_states: parts[", p, "] must match out's shape ", out.o.describe(), ", got ",
                  parts[p].o.describe());
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* o = out.o.as<float>();
  float* lse = out.lse.as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    float m = neg_inf;
    for (const auto& part : parts) m = std::fmax(m, part.lse.as<const float>()[r]);
    float* dst = o + r * dim;
    for (int64_t e = 0; e < dim; ++e) dst[e] = 0.0f;
    if (m == neg_inf) {  // every part empty: -inf - -inf would be NaN, so the output is zero
      lse[r] = neg_inf;
      continue;
    }
    double sum = 0.0;
    for (const auto& part : parts) {
      const float w = std::exp(part.lse.as<const float>()[r] - m);
      sum += w;
      const float* src = part.o.as<const float>() + r * dim;
      for (int64_t e = 0; e < dim; ++e) dst[e] += w * src[e];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t e = 0; e < dim; ++e) dst[e] *= inv;
    lse[r] = m + static_cast<float>(std::log(sum));
  }
}

}  // namespace attnkit
