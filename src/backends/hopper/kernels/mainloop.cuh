// The `hopper` extend kernel's consumers: each warpgroup owns 64 of the tile's rows and walks the
// K/V ring. Per K/V tile j, in its turn at the tensor cores (the others meanwhile run their
// softmaxes; turns go round the warpgroups in index order): issue S_j = Q K_j^T, then O += P_{j-1} V_{j-1}; hand the turn over; wait for S_j
// only, run the softmax of S_j while the PV product still runs, then wait for it, rescale O and
// pack P_j. S and O stay in registers; P goes from registers straight into the next product.
#pragma once

#include "backends/hopper/kernels/fp8.cuh"
#include "backends/hopper/kernels/softmax.cuh"
#include "cuda/wgmma_ops.cuh"

namespace attnkit::hopper {

template <typename C>
struct Consumer {
  using T = typename C::T;
  static constexpr int kN = C::kBlockN;
  static constexpr int kD = C::kHeadDim;
  int index;     // 0 or 1: which warpgroup, which 64 rows
  int lane, warp;  // warp within the warpgroup
  float o[kD / 2];  // O [64 x D]: the m64nD accumulator
  float s[kN / 2];  // S [64 x N], then P in f32
  uint32_t pa[C::kFp8 ? kN / 32 : kN / 16][4];  // P as the A operand, one k16 (fp8: k32) step of tokens each

  __device__ __forceinline__ int first_row() const { return index * 64 + warp * 16 + lane / 4; }
  // Barrier ids from the consumer's index, read again from threadIdx (warpgroup index + 1) where
  // used: kept in registers across the loop, they spill with three consumers.
  __device__ __forceinline__ static int my_index() { return static_cast<int>(threadIdx.x / 128) - 1; }
  __device__ __forceinline__ static int my_turn() { return kTurnBarrier + my_index(); }
  __device__ __forceinline__ static int next_turn() { return kTurnBarrier + (my_index() + 1) % C::kConsumers; }
  __device__ __forceinline__ static int my_barrier() { return kConsumerBarrier + my_index(); }

  __device__ __forceinline__ void issue_qk(const SmemAddrs& sm, int stage) {
    if constexpr (C::kFp8) {
      ::attnkit::cuda::wgmma::qk_ss_e4m3(s, sm.q8 + index * 64 * 128, sm.k + stage * C::kTileBytes);
    } else {
      ::attnkit::cuda::wgmma::qk_ss<T, kN, kD>(s, sm.q + index * 64 * 128, C::kBlockM * 128, sm.k + stage * C::kTileBytes);
    }
  }

  __device__ __forceinline__ void issue_pv(const SmemAddrs& sm, int stage) {
    if constexpr (C::kFp8) {
      ::attnkit::cuda::wgmma::pv_rs_e4m3(o, pa, sm.vt + stage * C::kTileBytes);
    } else {
      ::attnkit::cuda::wgmma::pv_rs<T, kN, kD>(o, pa, sm.v + stage * C::kTileBytes);
    }
    ::attnkit::cuda::wgmma::fence_regs(pa);  // P stays live until the product is waited for
  }

  // Tokens of a V tile past the history (stale page slots, or rows no box filled) are zeroed
  // before the product reads them: P is 0 there, but 0 x NaN is not. Both warpgroups write the
  // same zeros, each before its own product. A tile below kv_hi (<= kv_len) is whole: it returns
  // at once, before the box count's divisions, which would sit in the turn at the tensor cores.
  __device__ __forceinline__ void zero_v_tail(const ExtendParams& p, const SmemAddrs& sm, int stage, const Tile& t,
                                              int n0) {
    // The gather zero-fills rows past kv_hi itself, the fp8 path's V^T transpose too.
    if (C::kGather || C::kFp8 || n0 + kN <= t.kv_hi) return;
    const int valid = min(filled_rows(p, t, n0), t.kv_len - n0);
    if (valid >= kN) return;
    const int tid = warp * 32 + lane;
    unsigned char* base = nullptr;
    asm("cvta.shared.u64 %0, %1;" : "=l"(base) : "l"(static_cast<uint64_t>(sm.v + stage * C::kTileBytes)));
    for (int i = tid; i < (kN - valid) * 8 * C::kColBlocks; i += 128) {
      const int cb = i / ((kN - valid) * 8);
      const int rest = i % ((kN - valid) * 8);
      *reinterpret_cast<uint4*>(base + cb * kN * 128 + (valid + rest / 8) * 128 + (rest % 8) * 16) = make_uint4(0, 0, 0, 0);
    }
    ::attnkit::cuda::wgmma::fence_proxy_async();
    named_sync(my_barrier(), 128);
  }

  // Waits for a K or V stage to land. The gather's cp.async writes shared memory through the
  // generic proxy and wgmma reads it through the async proxy: the proxy fence orders the two
  // (the TMA writes through the async proxy already).
  __device__ __forceinline__ static void wait_landed(uint32_t full, uint32_t parity) {
    ::attnkit::cuda::tma::mbar_wait(full, parity);
    if constexpr (C::kGather) ::attnkit::cuda::wgmma::fence_proxy_async();
  }
  // V's stage as the PV product reads it: with fp8 products, V^T once transposed.
  __device__ __forceinline__ static void wait_v(const SmemAddrs& sm, const RingSlot<C::kStages>& slot) {
    wait_landed(C::kFp8 ? sm.bars.vt_full(slot.stage) : sm.bars.v_full(slot.stage), slot.parity);
  }

  __device__ __forceinline__ static int filled_rows(const ExtendParams& p, const Tile& t, int n0) {
    const KvBoxes<C> boxes(p, t, n0);
    return boxes.count * boxes.rows;
  }

  __device__ __forceinline__ void pack_p() {
    if constexpr (C::kFp8) {
      ::attnkit::cuda::wgmma::pack_p_e4m3(s, 1.0f, pa);  // S holds P x kPFactor already (Softmax::update)
    } else {
#pragma unroll
      for (int kk = 0; kk < kN / 16; ++kk) {
        pa[kk][0] = ::attnkit::cuda::pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        pa[kk][1] = ::attnkit::cuda::pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = ::attnkit::cuda::pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = ::attnkit::cuda::pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
      }
    }
  }

  __device__ __forceinline__ void scale_o(const float (&corr)[2]) {
#pragma unroll
    for (int nb = 0; nb < kD / 8; ++nb) {
      o[nb * 4 + 0] *= corr[0];
      o[nb * 4 + 1] *= corr[0];
      o[nb * 4 + 2] *= corr[1];
      o[nb * 4 + 3] *= corr[1];
    }
  }

  // S_j of tile j into `s`, in this warpgroup's turn; with O += P_{j-1} V_{j-1} behind it when
  // there is a previous tile. Returns once S_j has landed (the PV product may still run).
  __device__ __forceinline__ void products(const ExtendParams& p, const SmemAddrs& sm, const Tile& t, int stage,
                                           const RingSlot<C::kStages>* prev, int prev_n0) {
    namespace tma = ::attnkit::cuda::tma;
    namespace wg = ::attnkit::cuda::wgmma;
    named_sync(my_turn(), 256);
    issue_qk(sm, stage);
    if (prev != nullptr) {
      wait_v(sm, *prev);
      zero_v_tail(p, sm, prev->stage, t, prev_n0);
      issue_pv(sm, prev->stage);
    }
    named_arrive(next_turn(), 256);  // the next warpgroup's turn
    if (prev != nullptr) {
      wg::wait<1>();  // S_j only: the PV product runs on under the softmax
    } else {
      wg::wait<0>();
    }
    wg::fence_regs(s);
  }

  // Keeps the softmax of S_j above the wait for PV_{j-1}, so that it runs under that product. Left
  // alone, ptxas hoists the wait above the whole softmax (only registers tie them; empty asm
  // fences emit no PTX to hold it), and each warpgroup's exponentials then wait for its PV. A
  // branch on the row sums, which need every exponential of the tile, is a block boundary the wait
  // does not cross (seen in the SASS: the MUFU.EX2s between the two WARPGROUP.DEPBARs). It never
  // fires: a row sum is >= 0, or the canonical NaN 0x7fffffff, never all ones. The branch ends in
  // `exit`, not a trap: behind a trap, ptxas kept too few registers for the fp8 products' and head
  // dim 256's loops: it spilled 80 bytes of the fp8 kernel and serialised its products (C7512), and
  // 116 bytes at d256; behind `exit` it waits for the products only on that never-taken path (C7517)
  // and the loops keep their overlap (check-sass).
  __device__ __forceinline__ static void softmax_before_wait(const float (&l)[2]) {
    if (__float_as_uint(l[0]) == 0xffffffffu || __float_as_uint(l[1]) == 0xffffffffu) asm volatile("exit;");
  }

  __device__ __forceinline__ void release(uint32_t bar) const {
    __syncwarp();
    if (lane == 0) ::attnkit::cuda::tma::mbar_arrive(bar);
  }

  // One tile's K/V walk; kv_done counts the ring's tiles over the CTA's whole work. The first K/V
  // tile is peeled off the loop so that every wgmma wait is unconditional (ptxas then proves the
  // accumulators settled instead of inserting waits of its own).
  __device__ __forceinline__ void run(const ExtendParams& p, const SmemAddrs& sm, const Tile& t, Softmax<C>& sx,
                                      int& kv_done) {
    namespace tma = ::attnkit::cuda::tma;
    namespace wg = ::attnkit::cuda::wgmma;
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
    if (t.num_kv_tiles == 0) {
      if constexpr (!C::kFp8) release(sm.bars.q_empty());  // fp8: released once quantised
      return;
    }
    float corr[2];
    RingSlot<C::kStages> prev(kv_done);
    int prev_n0 = t.kv_lo;
    wait_landed(sm.bars.k_full(prev.stage), prev.parity);
    products(p, sm, t, prev.stage, nullptr, 0);
    release(sm.bars.k_empty(prev.stage));
    sx.cap_and_mask(s, prev_n0, lane);
    sx.update(s, corr);  // O is still 0: nothing to rescale
    pack_p();
    ++kv_done;
    for (int j = 1; j < t.num_kv_tiles; ++j, ++kv_done) {
      const RingSlot<C::kStages> slot(kv_done);
      const int n0 = t.kv_lo + j * kN;
      wait_landed(sm.bars.k_full(slot.stage), slot.parity);
      products(p, sm, t, slot.stage, &prev, prev_n0);
      release(sm.bars.k_empty(slot.stage));
      sx.cap_and_mask(s, n0, lane);
      const bool moved = sx.update(s, corr);
      softmax_before_wait(sx.l);
      wg::wait<0>();
      wg::fence_regs(o);
      wg::fence_regs(pa);
      release(sm.bars.v_empty(prev.stage));
      // Most tiles move no row's max (Softmax::kMaxSlack): the warp then skips O's rescale.
      if (__any_sync(0xffffffffu, moved)) scale_o(corr);
      pack_p();
      prev = slot;
      prev_n0 = n0;
    }
    if constexpr (!C::kFp8) release(sm.bars.q_empty());  // every S of the tile has been computed
    wait_v(sm, prev);
    zero_v_tail(p, sm, prev.stage, t, prev_n0);
    issue_pv(sm, prev.stage);
    wg::wait<0>();
    wg::fence_regs(o);
    release(sm.bars.v_empty(prev.stage));
  }
};

}  // namespace attnkit::hopper
