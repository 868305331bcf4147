// What the jit backend's tile templates (mma_tile.h, wgmma_tile.h) share: `attend`'s arguments and
// work item, the issue of a tile's copies (kTileIssue, at $TILE_ISSUE), and at $TILE_COMMON `merge`, which joins the split-KV
// partials, and `tile_mask`, the once-a-batch flags of the tiles a mask_mod leaves seen. They read
// the template's BLOCK_M, BLOCK_N, STAGES, GROUP, HEAD_DIM_VO, elem, pack2, commit and mask_mod.
// `#if PDL` blocks are kept only in sources for sm_90 and later (source.cc: resolve_flags).
#pragma once

#include <cstddef>

namespace attnkit::jit {

// `attend`'s arguments (at $ATTEND_PARAMS), what the host launches both templates with.
// items: [n][8] = request, first packed row, KV begin, KV end, partial row (-1: the item writes the
// output itself), first tile-mask entry, unused. requests: [batch][4] = first new token, prefix
// length, KV length, first page-table entry. q [tokens][heads][HEAD_DIM_QK], out [tokens][heads][HEAD_DIM_VO].
inline constexpr const char* kAttendParams = R"CUDA(const elem* __restrict__ q, elem* __restrict__ out, const elem* __restrict__ k_pool,
       const elem* __restrict__ v_pool, const int* __restrict__ items, const int* __restrict__ requests,
       const int* __restrict__ page_indices, const float* __restrict__ sinks, float* __restrict__ o_part,
       float* __restrict__ lse_part, float sm_scale, float soft_cap, int window_left, int causal,
       const unsigned char* __restrict__ tile_flags)CUDA";

// The CTA's work item and request, read first thing in `attend` (at $WORK_ITEM).
inline constexpr const char* kWorkItem = R"CUDA(
  const int* item = items + 8 * blockIdx.x;
  const int request = item[0], row0 = item[1], kv_lo = item[2], kv_hi = item[3], partial_row = item[4];
  const int kv_head = blockIdx.y, num_kv_heads = gridDim.y, num_qo_heads = num_kv_heads * GROUP;
  const int qo_start = requests[4 * request + 0];
  const int prefix = requests[4 * request + 1];
  const int kv_len = requests[4 * request + 2];
  const int* pages = page_indices + requests[4 * request + 3];
  const int q_len = kv_len - prefix;
  const int rows = q_len * GROUP;
)CUDA";

// Inside `attend`, at $TILE_ISSUE, after the template's load_tile(j): the mainloop's tile range
// [j_begin, j_end), issue(j), which loads tile j into its stage unless a mask_mod leaves it unseen
// (its 2 bits of flags kept for the mainloop), and the first STAGES - 1 tiles, a cp.async group
// each (Q travels in the first).
// The static shared memory kTileIssue declares with a mask_mod (seen_range), beside the template's
// dynamic buffer: the CTA's sum of both must fit (source.h: tile_fits_shared_memory).
inline constexpr size_t kMaskStaticSmemBytes = 2 * sizeof(int);
inline constexpr const char* kTileIssue = R"CUDA(
  int j_begin = 0, j_end = num_tiles;
#if HAS_MASK_MOD
  // Which tiles any row sees (bit 1) and which every row sees whole (bit 2), from tile_mask (once a
  // batch). The mainloop runs from the first seen tile to the last: a document mask leaves most of
  // a causal row's tiles before its document unseen, and walking them costs a barrier each. A tile
  // no row sees inside that range is neither loaded nor computed. 2 bits a stage.
  unsigned flags = 0;
  const unsigned char* my_flags = tile_flags + (long long)item[5] * num_kv_heads + kv_head;
  {
    __shared__ int seen_range[2];
    if (tid == 0) seen_range[0] = num_tiles, seen_range[1] = 0;
    __syncthreads();
    int lo = num_tiles, hi = 0;
    for (int j = tid; j < num_tiles; j += THREADS) {
      if (my_flags[(long long)j * num_kv_heads] & 1u) lo = min(lo, j), hi = j + 1;
    }
    if (hi > 0) atomicMin(&seen_range[0], lo), atomicMax(&seen_range[1], hi);
    __syncthreads();
    j_begin = seen_range[0];
    j_end = max(j_begin, seen_range[1]);
  }
  // Tile j's flags are read one issue ahead (issue is called for consecutive j), so the load's
  // latency hides behind a tile's work instead of stalling the next issue.
  unsigned next_flags = j_begin < j_end ? my_flags[(long long)j_begin * num_kv_heads] : 0u;
#endif
  auto issue = [&](int j) {
#if HAS_MASK_MOD
    const unsigned f = next_flags;
    if (j + 1 < j_end) next_flags = my_flags[(long long)(j + 1) * num_kv_heads];
    flags = (flags & ~(3u << (2 * (j % STAGES)))) | (f << (2 * (j % STAGES)));
    if (f & 1u) load_tile(j);
#else
    load_tile(j);
#endif
  };
  for (int j = j_begin; j < j_begin + STAGES - 1; ++j) {  // Q travels in the first group
    if (j < j_end) issue(j);
    commit();
  }
)CUDA";

inline constexpr const char* kTileCommon = R"CUDA(
// merges: [n][8] = request, first packed row, rows, splits, first partial row (split s's rows start
// s * BLOCK_M later), unused. One CTA a (merge, KV head): the splits' partials weighted by their
// log-sum-exp, the sink (where the layer has one) joining the sum once.
extern "C" __global__ void __launch_bounds__(128)
merge(elem* __restrict__ out, const float* __restrict__ o_part, const float* __restrict__ lse_part,
      const int* __restrict__ merges, const int* __restrict__ requests, const float* __restrict__ sinks) {
  const int* mg = merges + 8 * blockIdx.x;
  const int request = mg[0], row0 = mg[1], n_rows = mg[2], splits = mg[3], base = mg[4];
  const int kv_head = blockIdx.y, num_kv_heads = gridDim.y, num_qo_heads = num_kv_heads * GROUP;
  const int qo_start = requests[4 * request + 0];
#if PDL
  // Launched with programmatic stream serialisation right behind `attend` (backend.cc), so this
  // CTA may run before attend's grid has finished: above, only what the host wrote before attend
  // ran (the merge list, the requests); every thread waits here until attend's grid has completed
  // and its writes (the partials) are visible, before any read of them.
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  for (int c = threadIdx.x; c < n_rows * (HEAD_DIM_VO / 2); c += blockDim.x) {
    const int r = c / (HEAD_DIM_VO / 2), col = 2 * (c % (HEAD_DIM_VO / 2)), p = row0 + r;
    float mx = NEG_INF;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, lse_part[(long long)(base + s * BLOCK_M + r) * num_kv_heads + kv_head]);
    float sum = 0.0f, x0 = 0.0f, x1 = 0.0f;
    if (mx != NEG_INF) {
      for (int s = 0; s < splits; ++s) {
        const long long pr = (long long)(base + s * BLOCK_M + r) * num_kv_heads + kv_head;
        const float w = expf(lse_part[pr] - mx);
        sum += w;
        x0 += w * o_part[pr * HEAD_DIM_VO + col];
        x1 += w * o_part[pr * HEAD_DIM_VO + col + 1];
      }
    }
    const int h = kv_head * GROUP + p % GROUP;
    if (sinks != nullptr && mx != NEG_INF) sum += expf(sinks[h] - mx);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const long long token = qo_start + p / GROUP;
    *reinterpret_cast<unsigned*>(out + (token * num_qo_heads + h) * HEAD_DIM_VO + col) = pack2(x0 * inv, x1 * inv);
  }
}

#if HAS_MASK_MOD
// Once a batch (every layer with this mask reuses it), like FlexAttention's block mask: for each
// work item, tile and KV head, bit 1 where any of the block's rows sees a key of the tile, bit 2
// where every row sees every key, the mask evaluated on every pair. tile_flags[(first + j) * kv_heads + kv_head].
extern "C" __global__ void __launch_bounds__(128)
tile_mask(const int* __restrict__ items, const int* __restrict__ requests, unsigned char* __restrict__ tile_flags,
          int window_left, int causal) {
  const int* item = items + 8 * blockIdx.x;
  const int request = item[0], row0 = item[1], kv_lo = item[2], kv_hi = item[3];
  const int kv_head = blockIdx.y, num_kv_heads = gridDim.y;
  const int prefix = requests[4 * request + 1], kv_len = requests[4 * request + 2];
  const int q_len = kv_len - prefix, rows = q_len * GROUP;
  const int num_tiles = (kv_hi - kv_lo + BLOCK_N - 1) / BLOCK_N;
  for (int j = 0; j < num_tiles; ++j) {
    const int t0 = kv_lo + j * BLOCK_N;
    int any = 0, all = 1;
    for (int c = threadIdx.x; c < BLOCK_M * BLOCK_N; c += blockDim.x) {
      const int p = row0 + c / BLOCK_N, kv_pos = t0 + c % BLOCK_N;
      if (p >= rows) continue;
      const int qp = prefix + p / GROUP, h = kv_head * GROUP + p % GROUP;
      const bool seen = kv_pos < kv_hi && (!causal || kv_pos <= qp) && (window_left < 0 || kv_pos >= qp - window_left) &&
                        mask_mod(qp, kv_pos, h, kv_head, request, q_len, kv_len);
      any |= seen;
      all &= seen;
    }
    const int seen_any = __syncthreads_or(any), seen_all = __syncthreads_and(all);
    if (threadIdx.x == 0) tile_flags[((long long)item[5] + j) * num_kv_heads + kv_head] = (seen_any ? 1 : 0) | (seen_all ? 2 : 0);
  }
}
#endif
)CUDA";

}  // namespace attnkit::jit
