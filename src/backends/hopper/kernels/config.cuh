// The `hopper` extend kernel's shape: one CTA = one producer warpgroup (TMA) and two consumer
// warpgroups (wgmma + softmax) over a tile of 128 GQA-packed query rows, K/V tiles of kBlockN
// tokens in a ring of kStages shared-memory stages. The arithmetic behind each constant is beside
// it; kernel.cuh puts the roles together. How K/V tiles reach shared memory is KvLoad.
#pragma once

#include <cstdint>

#include "backends/hopper/kernels/extend.h"  // KvLoad

namespace attnkit::hopper {

// Named barriers (id 0 is __syncthreads): the consumers' turns at the tensor cores (consumer i
// waits on its own; the one before it in the ring arrives), and each consumer warpgroup's own.
constexpr int kMaxConsumers = 3;
constexpr int kTurnBarrier = 1;                              // + consumer index; 256 threads
constexpr int kConsumerBarrier = kTurnBarrier + kMaxConsumers;  // + consumer index; 128 threads

template <typename T_, int kHeadDim_, KvLoad kKvLoad_ = KvLoad::tma_boxes>
struct KernelConfig {
  using T = T_;  // q, k, v (as the products read them) and out: bf16 or f16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr KvLoad kKvLoad = kKvLoad_;
  static constexpr bool kFp8 = kKvLoad == KvLoad::tma_fp8;
  static constexpr bool kGather = kKvLoad == KvLoad::gather || kKvLoad == KvLoad::gather_e4m3;  // by 128 producer threads
  static constexpr bool kE4m3Kv = kKvLoad == KvLoad::gather_e4m3;
  static_assert(!kFp8 || kHeadDim_ == 128, "fp8 products at head dim 128 only");
  // Warpgroups of 64 rows (one wgmma M each), taking turns at the tensor cores. At d64 a tile's
  // products take half as long as at d128 while its softmax does not shrink, so two warpgroups
  // leave the tensor cores idle while both run softmaxes: three keep one at the products while the
  // other two run theirs. Not where the producer gathers: it needs the registers (at 152 a
  // consumer, ptxas serialises the products).
  static constexpr int kConsumers = kHeadDim == 64 && !kGather ? 3 : 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kBlockM = 64 * kConsumers;  // packed rows a tile (at most; see tile_rows)
  // d128 with 16-bit TMA boxes takes K/V tiles of 192 tokens: a tile's fixed costs (waits, turns,
  // the rescale of O, descriptors) spread over 1.5x the products. Pages of 64 and less divide it.
  static constexpr bool kWide = kHeadDim == 128 && kKvLoad == KvLoad::tma_boxes;
  // Registers per consumer thread: S [64 x N] is N / 2 floats, O [64 x D] D / 2, P (bf16) N / 4:
  // d64 / d128 at N 128: 64 + 32..64 + 32 = 128..160; d128 at N 192: 96 + 64 + 48 = 208; d256 at
  // N 64: 32 + 128 + 16 = 176. All fit kConsumerRegs with room for addresses and the softmax.
  static constexpr int kBlockN = kHeadDim == 256 ? 64 : kWide ? 192 : 128;
  // Shared memory: Q [kBlockM x D] + kStages x (K + V) [N x D], 2 bytes an element:
  //   d64:  24 KB + 4 x 32 KB = 152 KB;  d128: 32 KB + 3 x 64 KB = 224 KB, at N 192 32 KB + 2 x
  //   96 KB = 224 KB; d256: 64 KB + 2 x 64 KB = 192 KB;  (227 KB is the most a CTA may have).
  static constexpr int kStages = kHeadDim == 64 ? 4 : kHeadDim == 128 && !kWide ? 3 : 2;
  static constexpr int kColBlocks = kHeadDim / 64;  // Q's 128-byte (64-element) swizzled column blocks
  static constexpr int kKvColBlocks = kFp8 ? 1 : kColBlocks;  // a K/V row's: an e4m3 row is 128 bytes
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kTileBytes = kBlockN * kHeadDim * (kFp8 ? 1 : 2);  // one K or one V stage
  // fp8: Q in e4m3 (128 rows of 128 bytes) and each row's descale beside the 16-bit Q the TMA lands,
  // and a third buffer a stage, V^T. d128: 32 KB + 16 KB + 512 B + 3 x 48 KB = 192.5 KB.
  static constexpr int kQ8Offset = kQBytes + (kFp8 ? 3 : 2) * kStages * kTileBytes;
  static constexpr int kQScaleOffset = kQ8Offset + (kFp8 ? kBlockM * 128 : 0);
  static constexpr int kBarrierOffset = kQScaleOffset + (kFp8 ? kBlockM * 4 : 0);
  static constexpr int kSmemBytes = kBarrierOffset + 256;  // the barriers: 16 + (32 or 40) kStages bytes
  // setmaxnreg: the producer gives registers to the consumers, 40 + 2 x 232 = 504 per row of
  // three threads, 504 x 128 = 64512 of the SM's 65536. A gathering producer (cp.async, or e4m3
  // loaded and dequantised) keeps two rows' addresses, or four rows' 16 bytes, in flight: 72 +
  // 2 x 216, except at d256, whose 64 x 256 O accumulator needs 224 a consumer: 56 + 2 x 224.
  // fp8: producer warps 1-3 transpose V a 4 x 4 block of bytes at a time: 56 + 2 x 224.
  // d64's three consumers (S 64 + O 32 + P 32 registers): 32 + 3 x 160 = 512. N 192: 24 + 2 x
  // 240 (the TMA producer's loop fits 24).
  static constexpr int kRegsPerRow = kConsumers == 3 ? 512 : 504;  // of the 65536 / 128 = 512
  static constexpr int kConsumerRegs = kConsumers == 3 ? 160
                                       : kWide ? 240 : kFp8 ? 224 : !kGather ? 232 : kHeadDim == 256 ? 224 : 216;
  static constexpr int kTransposeThreads = 96;  // fp8: producer warps 1-3, each arriving on V^T full
  static constexpr int kProducerRegs = kRegsPerRow - kConsumers * kConsumerRegs;
  // Producer warps that issue the K/V boxes (each a share of a tile's boxes, one a lane): all
  // four, so that the copies of small pages (16 boxes a tile at page 16) go out from four warp
  // schedulers at once; one with fp8 products, whose warps 1-3 transpose V.
  static constexpr int kTmaWarps = kFp8 ? 1 : 4;
  // Arrivals that complete a K or V stage: an expect-tx arrival of each TMA warp (then the bytes),
  // or each of the producer warpgroup's 128 threads once its own rows have landed.
  static constexpr int kFullArrivals = kGather ? 128 : kTmaWarps;

  static_assert(kHeadDim % 64 == 0, "head dims 64, 128, 256");
  static_assert(kSmemBytes <= 227 * 1024, "one CTA must fit an SM's shared memory");
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536, "the register file");
  static_assert(kProducerRegs >= 24 && kProducerRegs % 8 == 0 && kConsumerRegs % 8 == 0, "setmaxnreg's counts");
  static_assert(kConsumers <= kMaxConsumers, "a turn barrier a consumer");
};

// fp8 products: how far (log2 units) the softmax lets a row's max lag behind its scores, so P <=
// 2^kFp8MaxSlack = 16, and the factor P is rounded to e4m3 with: P x kPFactor <= 256, within
// e4m3's largest (448), and small probabilities kept out of its subnormals (fp8.cuh).
constexpr float kFp8MaxSlack = 4.0f;
constexpr float kPFactor = 16.0f;
constexpr float kLog2PFactor = 4.0f;  // the softmax takes the factor into P's exponent (no multiply)

// The most rows a K/V TMA box holds (a page piece): every tile size is a multiple of it, so a
// page of more slots is cut into boxes that tile a K/V tile exactly (extend.cu's maps use it too).
constexpr int kMaxBoxRows = 64;

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The barriers in shared memory, from kBarrierOffset: Q full / empty, then per stage K full,
// K empty, V full, V empty; with fp8 products then V^T full per stage (at vt_base).
struct Barriers {
  uint32_t base;
  uint32_t vt_base;
  // The barriers of a kernel of `stages` ring stages, from `base`.
  __device__ __forceinline__ static Barriers at(uint32_t base, int stages) { return {base, base + 16 + 32 * stages}; }
  __device__ __forceinline__ uint32_t vt_full(int s) const { return vt_base + 8 * s; }
  __device__ __forceinline__ uint32_t q_full() const { return base; }
  __device__ __forceinline__ uint32_t q_empty() const { return base + 8; }
  __device__ __forceinline__ uint32_t k_full(int s) const { return base + 16 + 32 * s; }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return base + 24 + 32 * s; }
  __device__ __forceinline__ uint32_t v_full(int s) const { return base + 32 + 32 * s; }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return base + 40 + 32 * s; }
};

// The ring position of the n-th K/V tile a CTA handles, over all its work: stage and phase parity.
template <int kStages>
struct RingSlot {
  int stage;
  uint32_t parity;
  __device__ __forceinline__ explicit RingSlot(int n) : stage(n % kStages), parity((n / kStages) & 1) {}
};

}  // namespace attnkit::hopper
