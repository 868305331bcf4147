// The `jit` backend's kernel source, for reading what runs: the template rendered for one layer of
// a model over a cache, with q of one dtype, exactly as the backend compiles it (`attnkit jit
// --show`). Rendering needs no GPU.
#pragma once

#include <string>

#include "attnkit/dtype.h"
#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"

namespace attnkit {

// Throws attnkit::Error where the jit backend does not serve the layer (MLA, a head dim that is
// not a multiple of 8 up to 256, a dtype other than bf16 / f16) or a variant does not parse.
std::string jit_kernel_source(const AttentionSpec& spec, const KvCacheConfig& cache, DType q_dtype);

}  // namespace attnkit
