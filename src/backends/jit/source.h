// Rendering a kernel's source from its template (kernels/): the key names everything the source
// is specialised to, so equal keys give equal sources and one compiled module serves both.
#pragma once

#include <optional>
#include <string>

#include "attnkit/dtype.h"
#include "attnkit/kv_cache.h"
#include "attnkit/spec.h"

namespace attnkit::jit {

// The tensor-core template's tile: keys a K/V tile holds, the warp grid (WARPS_M warps of
// m_tiles x 16 rows; each tile's keys split WARPS_N ways) and the ring's stages. Part of the key:
// each is a kernel.
struct TileConfig {
  int block_n = 64;
  int warps_m = 4;
  int warps_n = 1;
  int m_tiles = 1;  // 16-row tiles a warp (1 or 2)
  int stages = 2;
  // The Hopper template (wgmma_tile, sm_90a) instead of mma_tile: warps_m / 4 warpgroups of 64
  // rows (m_tiles 1, warps_n 1), both products on wgmma.
  bool wgmma = false;

  bool operator==(const TileConfig&) const = default;
  int block_m() const { return 16 * m_tiles * warps_m; }
  int threads() const { return 32 * warps_m * warps_n; }
  std::string describe() const;  // "n64 w4x1 m1 s2", "n128 w8x1 m1 s2 wgmma"
  // Parses describe()'s text; nothing where it is not one.
  static std::optional<TileConfig> parse(const std::string& text);
};

// A latent key's output passes: 2 x 256 columns (kv_lora_rank 512).
inline constexpr int kLatentVoPasses = 2;

struct KernelKey {
  int head_dim_qk = 0;
  int head_dim_vo = 0;
  int group = 1;  // query heads a KV head
  int page_size = 0;
  DType dtype = DType::bf16;     // q and out
  DType kv_dtype = DType::bf16;  // the cache
  std::string score_mod;      // the kernel-side text (VariantExpr::cuda_source), empty: off
  std::string mask_mod;
  TileConfig tile;  // the tensor-core template's; unused by warp_row
  // Absorbed MLA over a plain 16-bit latent cache: K is the slot's head_dim_qk values, V its first
  // head_dim_vo (the V pool is the latent pool again, rows head_dim_qk apart).
  bool latent = false;

  // Tensor cores take both operands in one dtype: q and cache alike run mma_tile, else warp_row.
  bool tensor_cores() const { return dtype == kv_dtype; }
  // The passes mma_tile computes O in (blockIdx.z): a latent key's 512 fp32 columns a row do not
  // fit a thread's registers at once.
  int vo_passes() const { return latent && tensor_cores() ? kLatentVoPasses : 1; }
  bool operator==(const KernelKey&) const = default;
  // "mma_tile d128/128 g4 p16 bf16 kv bf16 n64 w4x1 m1 s2" (or "wgmma_tile ...", "warp_row ..."),
  // plus the variants; a latent key's has " latent" after the dtypes.
  std::string describe() const;
};

// The key of a layer's kernel over `cache` with q of `q_dtype` (the variants parsed to their
// kernel-side text); throws attnkit::Error where the jit backend does not serve them.
KernelKey kernel_key_for(const AttentionSpec& spec, const KvCacheConfig& cache, DType q_dtype);

// warp_row's CTA: a warp a query row, the group's heads on its warps.
inline constexpr int kWarpRowThreads = 128;

// Whether a source compiled for `arch` ("sm_90a", "sm_100") launches the split-KV merge with
// programmatic dependent launch: griddepcontrol is sm_90's and later's (backend.cc says why).
bool pdl_arch(const std::string& arch);

// The CUDA source of `key`'s kernel: mma_tile or, with a wgmma tile, wgmma_tile (entry points
// attend and merge, and tile_mask with a mask_mod) where key.tensor_cores(), else warp_row (attend).
// `arch` is the one it is compiled for (compile_arch's): where pdl_arch, the tile templates' `#if
// PDL` lines are kept (attend's griddepcontrol.launch_dependents, merge's griddepcontrol.wait);
// elsewhere, and with no arch, they are dropped and the source is what it was before them.
std::string render(const KernelKey& key, const std::string& arch = "");
std::string render_warp_row(const KernelKey& key);
std::string render_mma_tile(const KernelKey& key, bool pdl = false);
std::string render_wgmma_tile(const KernelKey& key, bool pdl = false);

// Shared memory the tile kernel of `key` is launched with: Q, then the ring of K/V stages, or
// mma_tile's epilogue's fp32 O where that is larger (the templates assert their own sums fit).
size_t mma_tile_smem_bytes(const KernelKey& key);
size_t wgmma_tile_smem_bytes(const KernelKey& key);
size_t tile_smem_bytes(const KernelKey& key);  // whichever template the tile names
// Whether the tile kernel of `key` fits one CTA's shared memory on sm_90 (kMaxSharedBytes): its
// dynamic buffer (tile_smem_bytes) plus the static memory its mask_mod path declares.
bool tile_fits_shared_memory(const KernelKey& key);

// Whether the wgmma template can serve `key` (16-bit q and cache alike, head dims multiples of 8)
// on `arch` (sm_90: wgmma is sm_90a's), and the architecture its source is compiled for there.
bool wgmma_serves(const KernelKey& key, const std::string& arch);
std::string compile_arch(const KernelKey& key, const std::string& arch);

}  // namespace attnkit::jit
