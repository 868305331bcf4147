// The one dispatch from a checked KernelKey (config.h) to a template instance: fn(q, kv, dim) is
// called with TypeTag<T> for q's CUDA type, TypeTag<TKv> for the cache's and an integral_constant
// head dim, for the one entry of each Support list that matches. Every instance the backend
// compiles is one of these lists' products, and nothing else.
#pragma once

#include <cstdint>

#include "attnkit/error.h"
#include "backends/planned/config.h"
#include "cuda/pick.cuh"

namespace attnkit::planned {

using cuda::TypeTag;

// e4m3 is read as raw bytes and converted by the kernels.
template <DType kDtype>
using CudaType = cuda::ElementType<kDtype, uint8_t>;

template <typename Fn>
void dispatch(const KernelKey& key, Fn&& fn) {
  using cuda::pick;
  bool ran = false;
  pick<Support::head_dims>(key.head_dim, [&](auto dim) {
    pick<Support::q_dtypes>(key.q_dtype, [&](auto q) {
      pick<Support::kv_dtypes>(key.kv_dtype, [&](auto kv) {
        fn(TypeTag<typename CudaType<q.value>::type>{}, TypeTag<typename CudaType<kv.value>::type>{}, dim);
        ran = true;
      });
    });
  });
  // select() checks a key first; only one that skipped it gets here.
  ATTNKIT_CHECK(ran, "planned: no kernel for head_dim ", key.head_dim, ", q ", dtype_name(key.q_dtype), ", kv ",
                dtype_name(key.kv_dtype));
}

}  // namespace attnkit::planned
