// The `hopper` extend kernel: warp-specialised, persistent. Warpgroup 0 is the producer (one warp
// issues every TMA copy, or with kGather all four gather K/V rows; producer.cuh), warpgroups 1 to
// kConsumers the consumers (wgmma and the softmax,
// mainloop.cuh / softmax.cuh, then epilogue.cuh). setmaxnreg moves registers from the producer to
// the consumers; full / empty mbarriers per ring stage order them; named barriers give the
// consumers turns at the tensor cores. The tile sequence is scheduler.cuh's.
#pragma once

#include "backends/hopper/kernels/epilogue.cuh"
#include "cuda/setmaxnreg.cuh"

namespace attnkit::hopper {

using ::attnkit::cuda::lower_registers;
using ::attnkit::cuda::raise_registers;

template <typename C>
__global__ void __launch_bounds__(C::kThreads, 1)
    extend_kernel(const __grid_constant__ ExtendMaps maps, const ExtendParams p) {
  namespace tma = ::attnkit::cuda::tma;
  extern __shared__ __align__(1024) unsigned char smem[];  // 1024: the 128-byte swizzle's atoms
  const uint32_t base = tma::smem_addr(smem);
  const SmemAddrs sm{base,
                     base + C::kQBytes,
                     base + C::kQBytes + C::kStages * C::kTileBytes,
                     base + C::kQBytes + 2 * C::kStages * C::kTileBytes,
                     base + C::kQ8Offset,
                     base + C::kQScaleOffset,
                     Barriers::at(base + C::kBarrierOffset, C::kStages)};
  const int warpgroup = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    tma::mbar_init(sm.bars.q_full(), 1);
    tma::mbar_init(sm.bars.q_empty(), 4 * C::kConsumers);  // one arrival a consumer warp
    for (int s = 0; s < C::kStages; ++s) {
      tma::mbar_init(sm.bars.k_full(s), C::kFullArrivals);
      tma::mbar_init(sm.bars.k_empty(s), 4 * C::kConsumers);
      tma::mbar_init(sm.bars.v_full(s), C::kFullArrivals);
      tma::mbar_init(sm.bars.v_empty(s), 4 * C::kConsumers);
      if constexpr (C::kFp8) tma::mbar_init(sm.bars.vt_full(s), C::kTransposeThreads);
    }
  }
  __syncthreads();

  if (warpgroup == 0) {
    lower_registers<C::kProducerRegs>();
    if (C::kGather || threadIdx.x < 32 * C::kTmaWarps) {
      produce<C>(maps, p, sm, static_cast<int>(threadIdx.x));
    } else if constexpr (C::kFp8) {
      transpose_v_tiles<C>(p, sm, static_cast<int>(threadIdx.x) - 32);
    }
    return;
  }
  raise_registers<C::kConsumerRegs>();
  Consumer<C> c;
  c.index = warpgroup - 1;
  c.warp = (threadIdx.x / 32) % 4;
  c.lane = threadIdx.x % 32;
  // The first turn at the tensor cores is consumer 0's: the last consumer, its predecessor in the
  // ring, opens it.
  if (c.index == C::kConsumers - 1) named_arrive(kTurnBarrier + 0, 256);
  int tiles_done = 0, kv_done = 0;
  for (int k = 0, w = cta_work(0); w < num_work(p); w = cta_work(++k)) {
    Tile t;
    if (!load_tile<C>(p, w, t)) continue;
    Softmax<C> sx(p, t, c.first_row());
    tma::mbar_wait(sm.bars.q_full(), tiles_done & 1);
    ++tiles_done;
    if constexpr (C::kFp8) {  // the 16-bit Q is free once quantised
      quantise_q<C>(sm, c.index, c.warp * 32 + c.lane);
      c.release(sm.bars.q_empty());
      const float* q_scale = reinterpret_cast<const float*>(generic_smem(sm.q_scale));
      sx.set_row_scales(q_scale[c.first_row()] * p.k_scale, q_scale[c.first_row() + 8] * p.k_scale);
    }
    c.run(p, sm, t, sx, kv_done);
    write_out<C>(p, t, c, sx);
  }
}

}  // namespace attnkit::hopper
