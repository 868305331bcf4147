// What the `planned` backend runs, written once. capabilities(), the support checks, the decode
// grid's sizing and both kernels' dispatch (kernels/select.cuh turns these lists into template
// instances) all read it, so they cannot disagree. Host-only: no CUDA header.
#pragma once

#include <array>
#include <string>

#include "attnkit/backend.h"
#include "attnkit/dtype.h"

namespace attnkit::planned {

struct Support {
  static constexpr std::array<int, 3> head_dims = {64, 128, 256};  // head_dim_qk == head_dim_vo
  static constexpr std::array<DType, 2> q_dtypes = {DType::f16, DType::bf16};  // q, k, v and out
  static constexpr std::array<DType, 3> kv_dtypes = {DType::f16, DType::bf16, DType::e4m3};  // the cache
  static constexpr int min_page_size = 1;
  static constexpr int max_page_size = 256;
};

// The runtime values that pick one kernel instance.
struct KernelKey {
  int head_dim = 0;
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
};

// Empty when Support covers `key` and `page_size`; else the reason, naming the field.
std::string why_unsupported(const KernelKey& key, int page_size);
// `key` once checked; else throws attnkit::Error "planned <who>: <reason>".
KernelKey select(const KernelKey& key, int page_size, const char* who);

// Support as the Capabilities every caller reads (MLA off: the `mla` backend's job).
Capabilities capabilities();

}  // namespace attnkit::planned
