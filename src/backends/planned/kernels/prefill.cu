// The extend kernel's host side: tile shapes per head dim, the default work list, the checks, and
// the dispatch of a checked KernelKey to one instantiation (select.cuh).
#include "backends/planned/kernels/prefill.h"

#include <algorithm>
#include <string>

#include "attnkit/error.h"
#include "backends/planned/kernels/prefill_kernel.cuh"
#include "backends/planned/kernels/select.cuh"
#include "cuda/check.h"
#include "cuda/smem_opt_in.h"

namespace attnkit::planned {

namespace {

// Tile shapes, per head dim (the same for every dtype, so the planner's tile count never depends on
// it). 64 and 128: two warpgroups (8 warps, 128 packed rows) issue wgmma against KV tiles of 64, at
// 128 registers so that two CTAs share an SM and one's softmax overlaps the other's MMAs.
// Measured on an H200 (bf16, 32/8 heads, head dim 128; causal 8k / full 8k TFLOP/s):
//   wgmma, KV tile 64, 2 CTAs an SM       417 / 426
//   wgmma, KV tile 128, 1 CTA an SM       394 / 414
//   wgmma, KV tile 64, 1 CTA an SM        327 / 333
//   mma.sync, 4 warps x 32 rows, 2 CTAs   287 / 288  (8 warps x 16 rows: 272; KV tile 32: -10%)
// 256: mma.sync, 16 rows a warp and KV tiles of 32, Q re-read from shared memory (its fragments
// alone would take 64 registers a thread); wgmma's accumulators would not fit beside S at 256.
template <typename T, typename TKv, int kHeadDim>
struct ConfigFor;
template <typename T, typename TKv>
struct ConfigFor<T, TKv, 64> {
  using type = PrefillConfig<T, TKv, 64, 8, 1, 64, 2, true>;
};
template <typename T, typename TKv>
struct ConfigFor<T, TKv, 128> {
  using type = PrefillConfig<T, TKv, 128, 8, 1, 64, 2, true>;
};
template <typename T, typename TKv>
struct ConfigFor<T, TKv, 256> {
  using type = PrefillConfig<T, TKv, 256, 4, 1, 32, 2>;
};

template <typename C>
void launch_config(const PrefillParams& p, cudaStream_t stream) {
  if constexpr (C::kWgmma) {
    int device = 0, major = 0;
    ATTNKIT_CUDA_CHECK(cudaGetDevice(&device));
    ATTNKIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major != 9)
      throw Error(::attnkit::detail::concat("planned prefill: head_dim ", p.head_dim_qk,
                                            " runs on wgmma, which needs a Hopper (sm_90a) GPU, got compute capability ",
                                            major, ".x"));
  }
  static cuda::SmemOptIn smem_opt_in;  // past 48 KB, once a device
  smem_opt_in.ensure(reinterpret_cast<const void*>(prefill_kernel<C>), C::kSmemBytes);
  const dim3 grid(static_cast<unsigned>(p.num_work_items), static_cast<unsigned>(p.num_kv_heads));
  prefill_kernel<C><<<grid, C::kThreads, C::kSmemBytes, stream>>>(p);
  ATTNKIT_CUDA_CHECK_LAUNCH("planned prefill (head_dim ", p.head_dim_qk, ", ", p.num_work_items, " work items x ",
                            p.num_kv_heads, " kv heads)");
}

// The config of one checked key: `Fn` is called with it.
template <typename Fn>
void with_config(const KernelKey& key, Fn&& fn) {
  dispatch(key, [&](auto q, auto kv, auto dim) {
    fn(typename ConfigFor<typename decltype(q)::type, typename decltype(kv)::type, dim.value>::type{});
  });
}

// The tiles are the same for every dtype (ConfigFor): the planner's tile count never depends on it.
template <typename Fn>
int tile_value(int head_dim, Fn&& fn) {
  int value = 0;
  with_config(select({head_dim, DType::bf16, DType::bf16}, Support::min_page_size, "prefill"),
              [&](auto cfg) { value = fn(cfg); });
  return value;
}

}  // namespace

int prefill_tile_rows(int head_dim) {
  return tile_value(head_dim, [](auto cfg) { return decltype(cfg)::kBlockM; });
}

int prefill_tile_kv(int head_dim) {
  return tile_value(head_dim, [](auto cfg) { return decltype(cfg)::kBlockN; });
}

std::vector<PrefillWorkItem> make_prefill_work(const ForwardBatch& batch, int num_qo_heads, int num_kv_heads,
                                               int head_dim) {
  const int tile_rows = prefill_tile_rows(head_dim);
  const int group = num_qo_heads / num_kv_heads;
  std::vector<PrefillWorkItem> work;
  std::vector<int64_t> cost;  // KV positions a tile visits under a causal mask: a proxy for its time
  for (int i = 0; i < batch.batch_size(); ++i) {
    const int64_t packed = int64_t{batch.qo_len(i)} * group;
    const int num_tiles = static_cast<int>((packed + tile_rows - 1) / tile_rows);
    for (int t = 0; t < num_tiles; ++t) {
      work.push_back({.request_idx = i, .qo_tile_idx = t, .kv_begin = 0, .kv_end = -1, .partial_row = -1});
      const int64_t last_row = std::min<int64_t>(packed, int64_t{t + 1} * tile_rows) - 1;
      cost.push_back(batch.prefix_lens[i] + last_row / group + 1);
    }
  }
  // Longest first: the tail of the launch is then made of short tiles, so SMs finish together.
  std::vector<size_t> order(work.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<PrefillWorkItem> sorted;
  sorted.reserve(work.size());
  for (size_t k : order) sorted.push_back(work[k]);
  return sorted;
}

void check_prefill_params(const PrefillParams& p) {
  auto fail = [](auto&&... parts) { throw Error(::attnkit::detail::concat("planned prefill: ", parts...)); };
  select({p.head_dim_qk, p.q_dtype, p.kv_dtype}, p.page_size, "prefill");
  if (p.num_kv_heads < 1 || p.num_qo_heads % p.num_kv_heads != 0)
    fail("num_qo_heads (", p.num_qo_heads, ") must be a multiple of num_kv_heads (", p.num_kv_heads, ")");
  if (p.num_kv_heads > 65535) fail("num_kv_heads must be at most 65535, got ", p.num_kv_heads);
  if (p.sm_scale <= 0.0f) fail("sm_scale must be positive, got ", p.sm_scale);
  if (p.num_work_items > 0 && (p.q == nullptr || p.out == nullptr || p.k_pool == nullptr || p.v_pool == nullptr ||
                               p.work == nullptr || p.qo_indptr == nullptr || p.kv_page_indptr == nullptr ||
                               p.kv_page_indices == nullptr || p.page_begin == nullptr || p.kv_last_page_len == nullptr ||
                               p.prefix_lens == nullptr))
    fail("q, out, k_pool, v_pool, work and the batch arrays must not be null");
  if ((p.custom_mask == nullptr) != (p.custom_mask_indptr == nullptr))
    fail("custom_mask and custom_mask_indptr must be given together");
}

void launch_prefill(const PrefillParams& p, cudaStream_t stream) {
  check_prefill_params(p);
  if (p.num_work_items == 0) return;
  // The math runs in q's type; a cache of another type is converted as its tiles are loaded.
  with_config({p.head_dim_qk, p.q_dtype, p.kv_dtype}, [&](auto cfg) { launch_config<decltype(cfg)>(p, stream); });
}

}  // namespace attnkit::planned
