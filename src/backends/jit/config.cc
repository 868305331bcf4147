#include "backends/jit/config.h"

#include <algorithm>

#include "attnkit/error.h"

namespace attnkit::jit {

namespace {

// A latent key's tiles: its K rows are 576 values (1168 bytes with the pad) and hold V too, so Q and
// the ring are Q_rows x 1168 + stages x block_n x 1168 bytes: 64 rows and two 64-key stages fill
// 219 KiB, 16 rows and four 32-key stages 164 KiB. One 16-row tile a warp (m_tiles 1): a thread
// holds a pass's 256 fp32 O columns (128 registers at m_tiles 1) beside its scores.
std::vector<TileConfig> latent_tiles(bool decode) {
  if (decode) return {{64, 1, 4, 1, 2}, {32, 1, 2, 1, 4}, {32, 1, 2, 1, 2}};
  return {{64, 4, 1, 1, 2}, {32, 4, 1, 1, 3}, {32, 4, 1, 1, 2}};
}

}  // namespace

std::vector<TileConfig> tile_candidates(const KernelKey& key, bool decode, const std::string& arch) {
  // {block_n, warps_m, warps_n, m_tiles, stages}. Decode reads every key once: deep rings keep
  // enough bytes in flight. Prefill reuses each tile over the block's rows: two row tiles a warp
  // halve the shared-memory reads a product needs, which bound it.
  std::vector<TileConfig> all =
      key.latent ? latent_tiles(decode)
      : decode ? std::vector<TileConfig>{{64, 1, 4, 1, 4}, {64, 1, 4, 1, 2}, {64, 1, 4, 1, 3}, {128, 1, 4, 1, 3}, {32, 1, 2, 1, 4}, {128, 1, 4, 1, 2}}
             : std::vector<TileConfig>{{64, 4, 1, 2, 2}, {32, 4, 1, 2, 3}, {64, 4, 1, 1, 3}, {64, 8, 1, 1, 2}, {128, 4, 1, 1, 2}};
  // Prefill on sm_90: the wgmma template, one or two warpgroups of 64 rows (a decode block of a
  // few rows would leave most of a warpgroup's 64 idle).
  if (!decode && wgmma_serves(key, arch)) {
    for (const TileConfig& t : {TileConfig{128, 8, 1, 1, 2, true}, TileConfig{128, 8, 1, 1, 3, true},
                                TileConfig{64, 8, 1, 1, 3, true}, TileConfig{128, 4, 1, 1, 3, true}}) {
      all.push_back(t);
    }
  }
  std::vector<TileConfig> fit;
  for (const TileConfig& t : all) {
    KernelKey k = key;
    k.tile = t;
    // Two row tiles of a head dim past 128 hold more accumulators than a thread's 255 registers.
    const bool registers = t.m_tiles == 1 || std::max(key.head_dim_qk, key.head_dim_vo) <= 128;
    if (tile_fits_shared_memory(k) && registers) fit.push_back(t);
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
  c.mla = true;
  c.mla_dims.assign(Support::mla_kv_lora_ranks.begin(), Support::mla_kv_lora_ranks.end());
  c.mla_rope_dims.assign(Support::mla_rope_dims.begin(), Support::mla_rope_dims.end());
  c.custom_mask = false;
  c.variants = true;
  return c;
}

}  // namespace attnkit::jit
