// The extend kernel: one CTA takes one work item (a q tile of GQA-packed rows of one request and KV
// head) through the paged K/V (cp.async, two stages) with wgmma (head dims 64, 128) or mma.sync
// (256) and an online softmax in registers. The body is the sequence of its roles:
//   producer (prefill_producer.cuh): the item's range, the Q tile, the K/V tile pipeline;
//   mainloop (prefill_mainloop.cuh): S = Q K^T, O += P V and the register-carried accumulators;
//   softmax (prefill_softmax.cuh): scale, soft-cap and the online update (the mask is here);
//   epilogue (prefill_epilogue.cuh): normalise, write out or the split's partials, the LSE.
// Tile shapes and the dispatch live in prefill.cu; the configuration and K/V tile loads in
// prefill_copy.cuh, fragment helpers in prefill_tile.cuh, the wgmma instructions in prefill_wgmma.cuh.
#pragma once

#include <cmath>

#include "backends/planned/kernels/prefill_copy.cuh"
#include "backends/planned/kernels/prefill_epilogue.cuh"
#include "backends/planned/kernels/prefill_mainloop.cuh"
#include "backends/planned/kernels/prefill_producer.cuh"
#include "backends/planned/kernels/prefill_softmax.cuh"

namespace attnkit::planned {

template <typename C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) prefill_kernel(const PrefillParams p) {
  namespace pd = prefill_detail;
  constexpr int kN = C::kBlockN;
  constexpr int kR = C::kRowTiles;

  extern __shared__ __align__(1024) unsigned char smem[];  // 1024: wgmma's 128-byte swizzle atoms

  const PrefillWorkItem w = p.work[blockIdx.x];
  const int kv_head = blockIdx.y;
  pd::PrefillItem it;
  if (!pd::init_rows<C>(p, w, it)) return;
  // The custom-mask flag is computed and kept in the kernel body (see prefill_softmax.cuh).
  const bool custom = p.custom_mask_indptr != nullptr && p.custom_mask_indptr[it.req + 1] > p.custom_mask_indptr[it.req];
  pd::init_kv_range<C>(p, w, custom, it);

  const int warp = pd::thread_warp();
  const int lane = pd::thread_lane();

  // Producer: the Q tile, then the slots of tiles 0 and 1 and tile 0's loads.
  const pd::PrefillKvSource<C> src(p, it);
  const pd::PrefillSmem<C> sm(smem);
  pd::load_q_tile<C>(p, it, kv_head, sm);
  pd::load_first_tile<C>(p, it, src, kv_head, sm);

  // Consumer state: the softmax's constants and the accumulators, carried in registers.
  const pd::PrefillSoftmax<C> softmax(p, it, custom);
  pd::PrefillO<C> r_o;
  pd::PrefillRowStat<C> r_m, r_l;
  pd::init_accum<C>(r_o, r_m, r_l);
  const uint32_t s_q_addr = tile::smem_addr(sm.q);
  const int warp_row = warp * 16 * kR;

  pd::PrefillQFrags<C> qf;
  for (int j = 0; j < it.num_tiles; ++j) {
    pd::wait_tile<C>();
    const int n0 = it.kv_lo + j * kN;
    pd::load_next_tile<C>(p, it, src, kv_head, sm, j);
    const int64_t next_slot = pd::fetch_slot<C>(p, it, src, j, n0);
    if (j == 0) qf.load(s_q_addr, warp_row);
    const uint32_t s_k_addr = tile::smem_addr(sm.k + (j & 1) * kN * C::kHeadDim);
    const uint32_t s_v_addr = tile::smem_addr(sm.v + (j & 1) * kN * C::kHeadDim);

    pd::PrefillScores<C> r_s;
    pd::qk_tile<C>(r_s, qf, s_q_addr, s_k_addr, warp_row);

    softmax.cap(r_s);
    // Mask only tiles that cross a boundary: each branch covers the whole tile, so the common
    // unmasked tile carries none of the mask's registers. Row (rt, h) sees [lo, hi) (a custom mask
    // further picks inside it); its token index is recomputed here rather than held in registers,
    // clamped so that rows past the end (dropped by the epilogue) read the mask in bounds.
    if (custom || n0 + kN > softmax.tile_unmasked_hi || n0 < softmax.tile_unmasked_lo) {
#pragma unroll
      for (int rt = 0; rt < kR; ++rt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int qo_idx = min((it.row0 + warp * 16 * kR + rt * 16 + lane / 4 + 8 * h) / it.group, it.qo_len - 1);
          const int pos = it.prefix + qo_idx;
          const int hi = custom || !p.causal ? it.kv_hi : min(it.kv_hi, pos + 1);
          const int lo = p.window_left >= 0 ? max(it.kv_lo, pos - p.window_left) : it.kv_lo;
          const uint8_t* g_mask_row = custom ? softmax.g_mask + int64_t{qo_idx} * it.kv_len : nullptr;
#pragma unroll
          for (int nb = 0; nb < kN / 8; ++nb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int t = n0 + nb * 8 + 2 * (lane % 4) + e;
              const bool visible = t >= lo && t < hi && (!custom || g_mask_row[t] != 0);
              if (!visible) r_s[rt][nb][2 * h + e] = -INFINITY;
            }
          }
        }
      }
    }
    softmax.update(r_s, r_o, r_m, r_l);
    pd::pv_tile<C>(r_o, r_s, s_v_addr);
    pd::store_slot<C>(it, sm, j, next_slot);
  }

  pd::write_out<C>(p, w, it, kv_head, r_o, r_m, r_l, warp_row);
}

}  // namespace attnkit::planned
