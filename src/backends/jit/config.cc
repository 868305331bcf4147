#include "backends/jit/config.h"

#include "attnkit/error.h"

namespace attnkit::jit {

std::vector<TileConfig> tile_candidates(const KernelKey& key, bool decode) {
  // {block_n, warps_m, warps_n, stages}. Decode reads every key once: deep rings keep enough bytes
  // in flight. Prefill reuses each tile over the block's rows: more rows a tile, fewer stages.
  const std::vector<TileConfig> all =
      decode ? std::vector<TileConfig>{{64, 1, 4, 4}, {64, 1, 4, 2}, {128, 1, 4, 3}, {32, 1, 2, 4}}
             : std::vector<TileConfig>{{64, 4, 1, 2}, {64, 4, 1, 3}, {64, 8, 1, 2}, {32, 4, 1, 3}};
  std::vector<TileConfig> fit;
  for (const TileConfig& t : all) {
    KernelKey k = key;
    k.tile = t;
    if (mma_tile_smem_bytes(k) <= kMaxSharedBytes) fit.push_back(t);
  }
  return fit;
}

Capabilities capabilities() {
  Capabilities c;
  c.device = Device::cuda;
  c.q_dtypes.assign(Support::q_dtypes.begin(), Support::q_dtypes.end());
  c.kv_dtypes.assign(Support::kv_dtypes.begin(), Support::kv_dtypes.end());
  c.max_head_dim = Support::max_head_dim;
  c.head_dim_multiple = Support::head_dim_multiple;
  c.mla = false;
  c.custom_mask = false;
  c.variants = true;
  return c;
}

}  // namespace attnkit::jit
