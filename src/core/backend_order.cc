#include "core/backend_order.h"

namespace attnkit {

std::span<const char* const> backend_order(const KvCacheConfig& cache) {
  static const char* const kCpu[] = {"cpu", "reference"};
  static const char* const kHopperFirst[] = {"mla", "hopper", "planned", "cuda-naive", "jit"};
  static const char* const kPlannedFirst[] = {"mla", "planned", "hopper", "cuda-naive", "jit"};
  if (cache.device != Device::cuda) return kCpu;
  // hopper ahead of planned where its extend kernel is measured the faster (the two share the decode
  // kernel): a 16-bit cache of pages of 16 slots or more (TMA boxes), at every head dim it serves.
  // H100, 1 x 8192, llama3-8b heads (docs/benchmarks.md): causal / full d128 at page 16 573 / 626
  // TFLOP/s against planned's 427 / 448, full d64 482 against 326, full d256 664 against 219; page
  // 64 likewise. Pages of 8 slots are not timed side by side; pages of 1, 2 and 4 (gathered, 281
  // against 410) and an e4m3 cache dequantised as it loads (297 against 332) stay planned's.
  const bool hopper_first = !cache.mla && cache.page_size >= 16 &&
                            (cache.dtype == DType::bf16 || cache.dtype == DType::f16);
  // jit last: it is chosen for what only it serves (user variants, head dims the others lack);
  // its steady state is below planned's (docs/benchmarks.md).
  if (hopper_first) return kHopperFirst;
  return kPlannedFirst;
}

}  // namespace attnkit
