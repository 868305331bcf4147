// The `hopper` extend kernel's shape: one CTA = one producer warpgroup (TMA) and two consumer
// warpgroups (wgmma + softmax) over a tile of 128 GQA-packed query rows, K/V tiles of kBlockN
// tokens in a ring of kStages shared-memory stages. The arithmetic behind each constant is beside
// it; kernel.cuh puts the roles together. How K/V tiles reach shared memory is KvLoad.
#pragma once

#include <cstdint>

namespace attnkit::hopper {

// The producer's ways of filling a K/V stage (producer.cuh).
enum class KvLoad {
  tma_boxes,    // TMA boxes of whole page pieces: pages of 8 slots or more
  gather,       // rows copied with cp.async by the producer warpgroup: any page size
  gather_e4m3,  // rows of an e4m3 cache loaded by the producer warpgroup, dequantised to T, stored
  tma_fp8,      // an e4m3 cache's raw bytes as TMA boxes, the products on e4m3 (d128): q quantised a
                // row at a time by the consumers, V transposed to V^T by producer warps 1-3
};

template <typename T_, int kHeadDim_, KvLoad kKvLoad_ = KvLoad::tma_boxes>
struct KernelConfig {
  using T = T_;  // q, k, v (as the products read them) and out: bf16 or f16
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr KvLoad kKvLoad = kKvLoad_;
  static constexpr bool kFp8 = kKvLoad == KvLoad::tma_fp8;
  static constexpr bool kGather = kKvLoad == KvLoad::gather || kKvLoad == KvLoad::gather_e4m3;  // by 128 producer threads
  static constexpr bool kE4m3Kv = kKvLoad == KvLoad::gather_e4m3;
  static_assert(!kFp8 || kHeadDim_ == 128, "fp8 products at head dim 128 only");
  static constexpr int kConsumers = 2;             // warpgroups of 64 rows: one wgmma M each
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kBlockM = 64 * kConsumers;  // packed rows a tile (at most; see tile_rows)
  // Registers per consumer thread: S [64 x N] is N / 2 floats, O [64 x D] D / 2, P (bf16) N / 4:
  // d64 / d128 at N 128: 64 + 32..64 + 32 = 128..160; d256 at N 64: 32 + 128 + 16 = 176. All fit
  // kConsumerRegs with room for addresses and the softmax.
  static constexpr int kBlockN = kHeadDim == 256 ? 64 : 128;
  // Shared memory: Q [128 x D] + kStages x (K + V) [N x D], 2 bytes an element:
  //   d64:  16 KB + 4 x 32 KB = 144 KB;  d128: 32 KB + 3 x 64 KB = 224 KB;
  //   d256: 64 KB + 2 x 64 KB = 192 KB;  (227 KB is the most a CTA may have; one CTA an SM).
  static constexpr int kStages = kHeadDim == 64 ? 4 : kHeadDim == 128 ? 3 : 2;
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
  static constexpr int kConsumerRegs = kFp8 ? 224 : !kGather ? 232 : kHeadDim == 256 ? 224 : 216;
  static constexpr int kTransposeThreads = 96;  // fp8: producer warps 1-3, each arriving on V^T full
  static constexpr int kProducerRegs = 504 - 2 * kConsumerRegs;
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
};

// Named barriers (id 0 is __syncthreads): the consumers' turns at the tensor cores, and each
// consumer warpgroup's own.
constexpr int kTurnBarrier = 1;      // + consumer index; 256 threads: one waits, the other arrives
constexpr int kConsumerBarrier = 3;  // + consumer index; 128 threads

// The barriers in shared memory, from kBarrierOffset: Q full / empty, then per stage K full,
// K empty, V full, V empty; with fp8 products then V^T full per stage (at vt_base).
struct Barriers {
  uint32_t base;
  uint32_t vt_base;
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
