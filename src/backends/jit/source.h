// Rendering a kernel's source from its template (kernels/): the key names everything the source
// is specialised to, so equal keys give equal sources and one compiled module serves both.
#pragma once

#include <string>

#include "attnkit/dtype.h"
#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"

namespace attnkit::jit {

struct KernelKey {
  int head_dim_qk = 0;
  int head_dim_vo = 0;
  int group = 1;  // query heads a KV head
  int page_size = 0;
  DType dtype = DType::bf16;     // q and out
  DType kv_dtype = DType::bf16;  // the cache
  std::string score_mod;      // the kernel-side text (VariantExpr::cuda_source), empty: off
  std::string mask_mod;

  bool operator==(const KernelKey&) const = default;
  // "warp_row d128/128 g4 p16 bf16", plus the variants where set.
  std::string describe() const;
};

// The key of a layer's kernel over `cache` with q of `q_dtype` (the variants parsed to their
// kernel-side text); throws attnkit::Error where the jit backend does not serve them.
KernelKey kernel_key_for(const AttentionSpec& spec, const KvCacheConfig& cache, DType q_dtype);

// The CUDA source of the warp-row kernel for `key`; its entry point is extern "C" attend.
std::string render_warp_row(const KernelKey& key);

}  // namespace attnkit::jit
