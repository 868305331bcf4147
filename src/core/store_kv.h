// Writing one layer's new K/V into the pools, per device. The caller has validated every shape and slot.
#pragma once

#include "attnkit/kv_cache.h"

namespace attnkit {

// src/core/store_kv_cpu.cc
void store_kv_cpu(const KvCacheConfig& config, void* k_pool, void* v_pool, const TensorView& k,
                  const TensorView& v, const int64_t* out_cache_loc, int64_t num_tokens);

#ifdef ATTNKIT_WITH_CUDA
// src/cuda/store_kv.cu
void store_kv_cuda(const KvCacheConfig& config, void* k_pool, void* v_pool, const TensorView& k,
                   const TensorView& v, const int64_t* out_cache_loc, int64_t num_tokens);
#endif

}  // namespace attnkit
