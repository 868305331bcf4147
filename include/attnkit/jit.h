// The `jit` backend's kernel source, for reading what runs: the template rendered for one layer of
// a model over a cache, with q of one dtype, exactly as the backend compiles it for a GPU before
// sm_90 (`attnkit jit --show`; for sm_90 and later the tensor-core source adds a few lines of
// programmatic dependent launch around the split-KV merge). Rendering needs no GPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attnkit/dtype.h"
#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"

namespace attnkit {

// Throws attnkit::Error where the jit backend does not serve the layer (MLA, a head dim that is
// not a multiple of 8 up to 256, a dtype other than bf16 / f16) or a variant does not parse.
// `tile` ("n32 w4x1 m2 s3", as ATTNKIT_JIT_TILE and the tuner's log write it) picks the tensor-core
// template's tile; empty: the first the tuner measures for prefill.
std::string jit_kernel_source(const AttentionSpec& spec, const KvCacheConfig& cache, DType q_dtype,
                              const std::string& tile = "");

// One kernel of a warmup: what it is, whether it was compiled now (else found in the disk cache)
// and the time that took.
struct JitWarmup {
  std::string kernel;
  bool compiled = false;
  double ms = 0.0;
};

// Compiles into the disk cache every kernel the layers of `model` need over `cache` with q of
// `q_dtype`, for GPU architecture `arch` ("sm_90"; empty: the current GPU's), each distinct kernel
// once, calling `progress` after each; no GPU is needed where `arch` is given. The cache folder:
// jit_cache_dir(). Throws attnkit::Error where NVRTC is missing or the folder cannot be written.
std::vector<JitWarmup> jit_warmup(const ModelSpec& model, const KvCacheConfig& cache, DType q_dtype,
                                  const std::string& arch,
                                  const std::function<void(const JitWarmup&, int done, int total)>& progress = {});
// Where compiled kernels are kept: $ATTNKIT_CACHE_DIR, else $XDG_CACHE_HOME/attnkit, else
// $HOME/.cache/attnkit; empty where none is set.
std::string jit_cache_dir();
// From now on, the jit backends made after this call pay what a new process with
// ATTNKIT_CACHE_DIR=dir would: the kernels and tile choices this process holds are set aside, and
// each kernel is loaded from `dir` or compiled (and tuned) into it. For timing first calls
// (`attnkit bench --jit-first-calls`); backends made before keep what they hold.
void jit_restart_caches(const std::string& dir);

}  // namespace attnkit
