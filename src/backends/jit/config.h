// What the `jit` backend runs, written once: capabilities(), the support check and the kernel key
// read it. Host-only: no CUDA header.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "attnkit/backend.h"
#include "attnkit/dtype.h"
#include "backends/jit/source.h"

namespace attnkit::jit {

struct Support {
  static constexpr std::array<DType, 2> q_dtypes = {DType::bf16, DType::f16};   // q, k, v and out
  static constexpr std::array<DType, 2> kv_dtypes = {DType::bf16, DType::f16};  // the cache, either with either q
  // Any head dims that are multiples of 8 up to this, qk and vo apart (96, 112, 160, 192/128 ...).
  static constexpr int max_head_dim = 256;
  static constexpr int head_dim_multiple = 8;
  // Absorbed MLA (DeepSeek's): one 16-bit latent of kv_lora_rank + qk_rope_head_dim values a token,
  // V its first kv_lora_rank, computed in kLatentVoPasses passes of output columns (source.h).
  static constexpr std::array<int, 1> mla_kv_lora_ranks = {512};
  static constexpr std::array<int, 1> mla_rope_dims = {64};
};

// The most shared memory one CTA may opt into on sm_90 (227 KiB).
inline constexpr size_t kMaxSharedBytes = 232448;

// The tile configurations the autotuner measures for `key` (its tile ignored): `decode` where every
// request brings at most 16 packed query rows (few rows, many keys: the warps split the keys), else
// prefill-shaped ones (the warps split the rows), and on `arch` sm_90 the wgmma template's
// (wgmma_serves). Each fits kMaxSharedBytes; the first is the default where tuning is off.
std::vector<TileConfig> tile_candidates(const KernelKey& key, bool decode, const std::string& arch);

Capabilities capabilities();
// Why the backend cannot run here (no CUDA device, no NVRTC), or empty (backend.cc: CUDA builds).
std::string why_unavailable();

}  // namespace attnkit::jit
