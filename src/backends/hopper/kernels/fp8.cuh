// The `hopper` extend kernel's fp8 products (KvLoad::tma_fp8, d128): what differs from the 16-bit
// path. The cache's e4m3 bytes arrive as TMA boxes; K is the product's operand as it lands, V is
// transposed to V^T by producer warps 1-3 (fp8 wgmma reads only K-major operands; the token order
// of V^T is the one cuda/wgmma_fp8.cuh derives, so P goes from S's registers into the product
// unmoved). Each consumer warpgroup quantises its 64 rows of q to e4m3 when the Q tile lands, a
// scale a row (448 / the row's largest |q|: the row's largest value becomes e4m3's largest), and
// the softmax takes the row's descale times k_scale into its logit scale. P is rounded to e4m3
// times kPFactor (P <= 2^kFp8MaxSlack: the softmax lets a row's max lag by that much; the factor
// keeps small probabilities out of e4m3's subnormals while P x kPFactor stays within 448), taken
// into P's exponent; the row sums carry it too, so it cancels, and O is multiplied by v_scale at
// the end.
#pragma once

#include <array>

#include "backends/hopper/kernels/producer.cuh"
#include "cuda/wgmma_fp8.cuh"

namespace attnkit::hopper {

constexpr float kE4m3Max = 448.0f;

__device__ __forceinline__ unsigned char* generic_smem(uint32_t addr) {
  return static_cast<unsigned char*>(__cvta_shared_to_generic(addr));
}

// Producer warps 1-3 (`tid` 0..95 among them): every V tile of the CTA's work, in ring order, from
// the raw stage the TMA filled into the stage's V^T, tokens past the history's filled rows as zeros;
// then each thread arrives on the stage's V^T barrier. The V stage (raw and V^T) is released by the
// consumers after their product, before which the TMA cannot refill it.
template <typename C>
__device__ __forceinline__ void transpose_v_tiles(const ExtendParams& p, const SmemAddrs& sm, int tid) {
  namespace tma = ::attnkit::cuda::tma;
  int kv_done = 0;
  for (int k = 0, w = cta_work(0); w < num_work(p); w = cta_work(++k)) {
    Tile t;
    if (!load_tile<C>(p, w, t)) continue;
    for (int j = 0; j < t.num_kv_tiles; ++j, ++kv_done) {
      const RingSlot<C::kStages> ring(kv_done);
      const int n0 = t.kv_lo + j * C::kBlockN;
      const KvBoxes<C> boxes(p, t, n0);
      const int valid = min(boxes.count * boxes.rows, t.kv_len - n0);
      tma::mbar_wait(sm.bars.v_full(ring.stage), ring.parity);
      ::attnkit::cuda::wgmma::transpose_v_e4m3(generic_smem(sm.v + ring.stage * C::kTileBytes),
                                               generic_smem(sm.vt + ring.stage * C::kTileBytes), tid,
                                               C::kTransposeThreads, valid);
      ::attnkit::cuda::wgmma::fence_proxy_async();  // generic writes, read next by wgmma
      tma::mbar_arrive(sm.bars.vt_full(ring.stage));
    }
  }
}

// One consumer warpgroup's 64 rows of the landed 16-bit Q tile to e4m3 (`tid` 0..127 in the
// warpgroup: two threads a row, a 64-value column block each), with each row's descale (the factor
// that takes an e4m3 product back to q's scale) beside them. Synchronises the warpgroup, so its
// threads may then read any of its rows' descales.
template <typename C>
__device__ __forceinline__ void quantise_q(const SmemAddrs& sm, int index, int tid) {
  using T = typename C::T;
  const int row = index * 64 + tid / 2;
  const int half = tid % 2;
  const unsigned char* src = generic_smem(sm.q + half * C::kBlockM * 128);
  auto piece = [&](int c) {  // 16-byte piece c of this thread's 128 bytes of the row, as 8 floats
    const uint4 raw = *reinterpret_cast<const uint4*>(src + ::attnkit::cuda::wgmma::swizzled_byte(row, 16 * c));
    const T* v = reinterpret_cast<const T*>(&raw);
    float f[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = static_cast<float>(v[i]);
    return std::array<float, 8>{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]};
  };
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const auto f = piece(c);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(f[i]));
  }
  amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
  const float inv = amax > 0.0f ? kE4m3Max / amax : 1.0f;
  unsigned char* q8 = generic_smem(sm.q8);
#pragma unroll
  for (int c = 0; c < 4; ++c) {  // 16 e4m3 bytes from two 16-bit pieces
    const auto a = piece(2 * c), b = piece(2 * c + 1);
    namespace wg = ::attnkit::cuda::wgmma;
    const uint4 out = make_uint4(wg::e4m3x4(a[0] * inv, a[1] * inv, a[2] * inv, a[3] * inv),
                                 wg::e4m3x4(a[4] * inv, a[5] * inv, a[6] * inv, a[7] * inv),
                                 wg::e4m3x4(b[0] * inv, b[1] * inv, b[2] * inv, b[3] * inv),
                                 wg::e4m3x4(b[4] * inv, b[5] * inv, b[6] * inv, b[7] * inv));
    *reinterpret_cast<uint4*>(q8 + wg::swizzled_byte(row, 64 * half + 16 * c)) = out;
  }
  if (half == 0) reinterpret_cast<float*>(generic_smem(sm.q_scale))[row] = 1.0f / inv;
  ::attnkit::cuda::wgmma::fence_proxy_async();
  named_sync(kConsumerBarrier + index, 128);
}

}  // namespace attnkit::hopper
