// compare() and default_tolerance(): the element-wise comparison of an output with a reference.
#include "attnkit/compare.h"

#include <cmath>
#include <limits>

#include "attnkit/error.h"

namespace attnkit {

double default_tolerance(DType q_dtype, DType kv_dtype) {
  // The reference reads the same rounded q and the same cache bytes, so what is left is the
  // backend's own rounding: its output and, in tensor-core kernels, the probabilities P rounded
  // to the q dtype before P V. Both are relative errors of at most one unit roundoff u of that
  // dtype, on values bounded by max|V|; we allow 4u, plus fp32 accumulation noise for f32.
  (void)kv_dtype;
  switch (q_dtype) {
    case DType::f32: return 1e-5;            // fp32 accumulation over a few thousand terms
    case DType::f16: return 4.0 * 0x1p-11;   // 2.0e-3
    case DType::bf16: return 4.0 * 0x1p-8;   // 1.6e-2
    case DType::e4m3: return 4.0 * 0x1p-4;   // 0.25: q and P rounded to e4m3 (hopper's fp8 products)
    default: return 0.0;
  }
}

namespace {
void check_operand(const TensorView& t, const char* field) {
  ATTNKIT_CHECK(t.device == Device::cpu, "compare: ", field, " ", t.describe(), " is on ", device_name(t.device),
                ", expected a host view");
  const bool value_dtype = t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16 ||
                           t.dtype == DType::e4m3;
  ATTNKIT_CHECK(value_dtype, "compare: ", field, " dtype ", dtype_name(t.dtype), ", expected f32, f16, bf16 or e4m3");
  ATTNKIT_CHECK(t.numel() == 0 || !t.empty(), "compare: ", field, " ", t.describe(), " has no data");
}
}  // namespace

Comparison compare(const TensorView& got, const TensorView& want) {
  check_operand(got, "got");
  check_operand(want, "want");
  ATTNKIT_CHECK(got.numel() == want.numel(), "compare: got ", got.describe(), " holds ", got.numel(),
                " elements, expected the ", want.numel(), " of want ", want.describe());
  Comparison c;
  double worst = -1.0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = load_as_float(got.data, got.dtype, i);
    const double w = load_as_float(want.data, want.dtype, i);
    c.max_ref = std::max(c.max_ref, std::fabs(w));
    // A NaN (the poison of an unwritten output) or an infinity is the worst error there is.
    const double err = std::isfinite(g) ? std::fabs(g - w) : std::numeric_limits<double>::infinity();
    if (err > worst) {
      worst = err;
      c.worst = i;
      c.got = g;
      c.want = w;
    }
  }
  c.max_abs_err = std::max(worst, 0.0);
  c.rel_err = c.max_ref > 0.0 ? c.max_abs_err / c.max_ref : c.max_abs_err;
  return c;
}

}  // namespace attnkit
