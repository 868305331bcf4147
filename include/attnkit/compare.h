// Comparing a backend's output with a reference output element by element: the rule by which
// `attnkit check`, the test suite and `attnkit replay --verify` pass or fail a result.
#pragma once

#include <cstdint>

#include "attnkit/dtype.h"
#include "attnkit/tensor.h"

namespace attnkit {

// The bound on max|out - ref| / max|ref| for a dtype pair, from the unit roundoff of the narrowest
// type on the path (see src/core/compare.cc for the derivation). `q_dtype`: the dtype the products
// round q and P to (AttentionBackend::products_dtype: q's own, or e4m3 for hopper's fp8 products).
double default_tolerance(DType q_dtype, DType kv_dtype);

struct Comparison {
  double max_abs_err = 0.0;  // max |got - want|; infinite where a got value is NaN or infinite
  double max_ref = 0.0;      // max |want|
  double rel_err = 0.0;      // max_abs_err / max_ref (max_abs_err itself where max_ref is 0)
  int64_t worst = 0;         // flat index of the first element with the largest error
  double got = 0.0;          // both values there
  double want = 0.0;
  bool within(double tolerance) const { return rel_err <= tolerance; }
};

// Compares every element of `got` with `want`: host views of value dtypes (f32, f16, bf16, e4m3)
// with the same element count; anything else throws attnkit::Error naming the view.
Comparison compare(const TensorView& got, const TensorView& want);

}  // namespace attnkit
