#include "core/backend_order.h"

namespace attnkit {

std::span<const char* const> backend_order(const KvCacheConfig& cache) {
  static const char* const kCpu[] = {"cpu", "reference"};
  static const char* const kHopperFirst[] = {"mla", "hopper", "planned", "cuda-naive", "jit"};
  static const char* const kPlannedFirst[] = {"mla", "planned", "hopper", "cuda-naive", "jit"};
  if (cache.device != Device::cuda) return kCpu;
  // hopper ahead of planned where its extend kernel is measured the faster (the two share the decode
  // kernel): a 16-bit cache of pages of 64 slots or more (TMA boxes of whole pages), head dim 128.
  // H100, 1 x 8192, llama3-8b heads, page 64: 534 causal / 583 full TFLOP/s against planned's 411 /
  // 432 (docs/benchmarks.md). At page 16 the two tie (408 / 441 against 411 / 428); at page 1 (281
  // against 410) and under an e4m3 cache (297 against 332) hopper is the slower, and at head dims 64
  // and 256 the two have not been timed side by side.
  const bool hopper_first = !cache.mla && cache.page_size >= 64 && cache.head_dim_k == 128 &&
                            (cache.dtype == DType::bf16 || cache.dtype == DType::f16);
  // jit last: it is chosen for what only it serves (user variants, head dims the others lack);
  // its steady state is below planned's (docs/benchmarks.md).
  if (hopper_first) return kHopperFirst;
  return kPlannedFirst;
}

}  // namespace attnkit
