// How fast can a decode kernel read a paged bf16 KV cache on this GPU, by copy mechanism and by
// what one unit of work covers? No attention is computed: each mode only moves the K/V bytes of a
// llama3-8b decode batch (8 KV heads, head_dim 128, pages of 16 slots in shuffled order) into the
// SM and touches them, so the figures are the ceilings each design can reach.
//
//   head-major: a unit is (request, KV head, 512 keys): 256-byte rows, 2 KB apart in the pool
//     bulk-rows   one bulk copy (TMA) a lane a row, per-warp mbarrier pipelines (the decode kernel's)
//     cp-async    16 bytes a lane (cp.async.cg), a warp's 32 rows a stage, per-warp groups
//     ldg         16-byte loads to registers, 16 a lane in flight, no shared memory
//   page-major: a unit is (request, 64 keys, all 8 KV heads): whole pages, 32 KB contiguous
//     bulk-page   one bulk copy of the page's K and one of its V, a CTA-wide pipeline
//     bulk-slot   the same bytes as one bulk copy a slot (2 KB) a lane
//     ldg-page    16-byte loads to registers, a warp a page
//
// Build and run on the GPU machine:
//   nvcc -O3 -std=c++17 -arch=sm_90a -Isrc -Iinclude bench/decode_read_bench.cu -o /tmp/drb && /tmp/drb
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "backends/planned/kernels/decode_copy.cuh"

namespace dd = attnkit::planned::decode_detail;
namespace tile = attnkit::planned::tile;

namespace {

// The bulk-copy (TMA) side the decode kernel no longer uses, for the modes that compare it.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t s_bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(s_bar), "r"(bytes) : "memory");
}
// `bytes` (a multiple of 16) global -> shared by the copy engine; completes on s_bar's transaction
// count. Both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_copy(uint32_t s_dst, const void* g_src, int bytes, uint32_t s_bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(s_dst),
               "l"(g_src), "r"(bytes), "r"(s_bar)
               : "memory");
}

constexpr int kHeads = 8, kDim = 128, kPage = 16;
constexpr int kRowBytes = kDim * 2;                      // one head's row: 256 B
constexpr int kSlotBytes = kHeads * kRowBytes;           // one slot, all heads: 2 KB
constexpr int kPageBytes = kPage * kSlotBytes;           // one page of K (or V): 32 KB
constexpr int kUnitKeysHead = 512, kUnitKeysPage = 64;   // both: 256 KB of K+V a unit

struct Params {
  const unsigned char* k;
  const unsigned char* v;
  const int* pages;  // [batch, pages_per_req]
  int pages_per_req;
  int units;
  int units_per_req;
  unsigned* sink;
};

enum Mode { kBulkRows, kCpAsync, kLdg, kBulkPage, kBulkSlot, kLdgPage };

__device__ __forceinline__ unsigned fold(uint4 x) { return x.x ^ x.y ^ x.z ^ x.w; }

// Head-major, bulk copies: 4 warps, each its own kS-stage pipeline of 16 K + 16 V rows, rows
// kStride bytes apart in shared memory (256: packed; 272: the decode kernel's padding).
template <int kS, int kStride = kRowBytes>
__global__ void __launch_bounds__(128) bulk_rows(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kStageBytes = 32 * kStride;  // one warp's stage
  const uint32_t s_base = tile::smem_addr(smem) + warp * kS * kStageBytes;
  const uint32_t s_bar = tile::smem_addr(smem) + 4 * kS * kStageBytes + warp * kS * 8;
  if (lane < kS) dd::mbar_init(s_bar + lane * 8, 1);
  dd::mbar_init_fence();
  __syncwarp();
  unsigned acc = 0;
  const int tiles = p.units_per_req == 0 ? 0 : kUnitKeysHead / 64;
  // This CTA's (unit, tile) stream, flattened.
  const int my_units = (p.units - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int steps = my_units * tiles;
  auto issue = [&](int step) {
    const int u = blockIdx.x + (step / tiles) * gridDim.x, t = step % tiles;
    const int req = u / p.units_per_req, rem = u % p.units_per_req;
    const int head = rem % kHeads, chunk = rem / kHeads;
    const int key = chunk * kUnitKeysHead + t * 64 + warp * 16 + lane % 16;
    const int page = __ldg(p.pages + req * p.pages_per_req + key / kPage);
    const unsigned char* src = (lane < 16 ? p.k : p.v) + (int64_t{page} * kPage + key % kPage) * kSlotBytes + head * kRowBytes;
    const int s = step % kS;
    __syncwarp();
    if (lane == 0) mbar_arrive_expect_tx(s_bar + s * 8, 32 * kRowBytes);
    __syncwarp();
    bulk_copy(s_base + s * kStageBytes + lane * kStride, src, kRowBytes, s_bar + s * 8);
  };
  for (int s = 0; s < kS - 1 && s < steps; ++s) issue(s);
  for (int step = 0; step < steps; ++step) {
    if (step + kS - 1 < steps) issue(step + kS - 1);
    dd::mbar_wait(s_bar + (step % kS) * 8, (step / kS) & 1);
    acc ^= *reinterpret_cast<const unsigned*>(smem + warp * kS * kStageBytes + (step % kS) * kStageBytes + lane * kStride);
  }
  if (acc == 0x12345678u) *p.sink = acc;
}

// Head-major, cp.async: each warp copies its 32 rows (16 K + 16 V) as 512 chunks of 16 bytes.
template <int kS>
__global__ void __launch_bounds__(128) cp_async_rows(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kStageBytes = 32 * kRowBytes;
  unsigned char* s_warp = smem + warp * kS * kStageBytes;
  unsigned acc = 0;
  const int tiles = kUnitKeysHead / 64;
  const int my_units = (p.units - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int steps = my_units * tiles;
  auto issue = [&](int step) {
    if (step < steps) {
      const int u = blockIdx.x + (step / tiles) * gridDim.x, t = step % tiles;
      const int req = u / p.units_per_req, rem = u % p.units_per_req;
      const int head = rem % kHeads, chunk = rem / kHeads;
      const uint32_t dst = tile::smem_addr(s_warp + (step % kS) * kStageBytes);
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int idx = i * 32 + lane;  // 16 chunks a row; rows 0-15 K, 16-31 V
        const int row = idx / 16, c = idx % 16;
        const int key = chunk * kUnitKeysHead + t * 64 + warp * 16 + row % 16;
        const int page = __ldg(p.pages + req * p.pages_per_req + key / kPage);
        const unsigned char* src = (row < 16 ? p.k : p.v) + (int64_t{page} * kPage + key % kPage) * kSlotBytes + head * kRowBytes + c * 16;
        tile::cp_async_16(dst + idx * 16, src, true);
      }
    }
    tile::cp_async_commit();
  };
  for (int s = 0; s < kS - 1; ++s) issue(s);
  for (int step = 0; step < steps; ++step) {
    issue(step + kS - 1);
    tile::cp_async_wait<kS - 1>();
    __syncwarp();
    acc ^= *reinterpret_cast<const unsigned*>(s_warp + (step % kS) * kStageBytes + lane * kRowBytes);
    __syncwarp();
  }
  if (acc == 0x12345678u) *p.sink = acc;
}

// Head-major, plain loads: each warp reads its 32 rows of a tile into registers.
__global__ void __launch_bounds__(128) ldg_rows(Params p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned acc = 0;
  const int tiles = kUnitKeysHead / 64;
  for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
    const int req = u / p.units_per_req, rem = u % p.units_per_req;
    const int head = rem % kHeads, chunk = rem / kHeads;
    for (int t = 0; t < tiles; ++t) {
      uint4 r[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int idx = i * 32 + lane, row = idx / 16, c = idx % 16;
        const int key = chunk * kUnitKeysHead + t * 64 + warp * 16 + row % 16;
        const int page = __ldg(p.pages + req * p.pages_per_req + key / kPage);
        r[i] = __ldg(reinterpret_cast<const uint4*>((row < 16 ? p.k : p.v) + (int64_t{page} * kPage + key % kPage) * kSlotBytes + head * kRowBytes + c * 16));
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) acc ^= fold(r[i]);
    }
  }
  if (acc == 0x12345678u) *p.sink = acc;
}

// Page-major, bulk copies: a CTA-wide pipeline of whole pages (K and V), kS stages. kPieces: the
// copies a page of K (or V) is cut into (1: 32 KB at once; 16: one slot a copy).
template <int kS, int kPieces>
__global__ void __launch_bounds__(128) bulk_pages(Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kStageBytes = 2 * kPageBytes;
  const uint32_t s_bar = tile::smem_addr(smem) + kS * kStageBytes;
  if (threadIdx.x < kS) dd::mbar_init(s_bar + threadIdx.x * 8, 1);
  dd::mbar_init_fence();
  __syncthreads();
  unsigned acc = 0;
  const int tiles = kUnitKeysPage / kPage;
  const int my_units = (p.units - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const int steps = my_units * tiles;
  auto issue = [&](int step) {
    if (step >= steps || threadIdx.x >= 32) return;
    const int u = blockIdx.x + (step / tiles) * gridDim.x, t = step % tiles;
    const int req = u / p.units_per_req, chunk = u % p.units_per_req;
    const int page = __ldg(p.pages + req * p.pages_per_req + chunk * tiles + t);
    const int s = step % kS;
    if (threadIdx.x == 0) mbar_arrive_expect_tx(s_bar + s * 8, kStageBytes);
    __syncwarp();
    constexpr int kPieceBytes = kPageBytes / kPieces;
    for (int i = threadIdx.x; i < 2 * kPieces; i += 32) {
      const unsigned char* src = (i < kPieces ? p.k : p.v) + int64_t{page} * kPageBytes + (i % kPieces) * kPieceBytes;
      bulk_copy(tile::smem_addr(smem) + s * kStageBytes + i * kPieceBytes, src, kPieceBytes, s_bar + s * 8);
    }
  };
  for (int s = 0; s < kS - 1; ++s) issue(s);
  for (int step = 0; step < steps; ++step) {
    issue(step + kS - 1);
    dd::mbar_wait(s_bar + (step % kS) * 8, (step / kS) & 1);
    acc ^= *reinterpret_cast<const unsigned*>(smem + (step % kS) * kStageBytes + threadIdx.x * 512);
    __syncthreads();  // the stage is refilled next step
  }
  if (acc == 0x12345678u) *p.sink = acc;
}

// Page-major, plain loads: warp w reads page w of the unit's 4 (K then V), 16 loads in flight a lane.
__global__ void __launch_bounds__(128) ldg_pages(Params p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned acc = 0;
  const int tiles = kUnitKeysPage / kPage;
  for (int u = blockIdx.x; u < p.units; u += gridDim.x) {
    const int req = u / p.units_per_req, chunk = u % p.units_per_req;
    const int page = __ldg(p.pages + req * p.pages_per_req + chunk * tiles + warp);
    for (int half = 0; half < 2; ++half) {
      const uint4* src = reinterpret_cast<const uint4*>((half == 0 ? p.k : p.v) + int64_t{page} * kPageBytes);
      for (int base = 0; base < kPageBytes / 16; base += 16 * 32) {
        uint4 r[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) r[i] = __ldg(src + base + i * 32 + lane);
#pragma unroll
        for (int i = 0; i < 16; ++i) acc ^= fold(r[i]);
      }
    }
  }
  if (acc == 0x12345678u) *p.sink = acc;
}

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

template <typename Kernel>
void time_it(const char* name, Kernel kernel, int smem, Params p, double bytes) {
  if (smem > 48 * 1024) CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int per_sm = 0, sms = 0;
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128, smem));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = sms * per_sm;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 25; ++i) {
    CHECK(cudaEventRecord(a));
    kernel<<<grid, 128, smem>>>(p);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (i >= 5) ms.push_back(t);
  }
  CHECK(cudaGetLastError());
  std::sort(ms.begin(), ms.end());
  const float med = ms[ms.size() / 2];
  std::printf("%-34s %2d CTAs/SM  %8.1f us  %5.2f TB/s\n", name, per_sm, med * 1e3, bytes / (med * 1e-3) / 1e12);
}

}  // namespace

int main() {
  const int batch = 64, kv_len = 16384;
  const int pages_per_req = kv_len / kPage, num_pages = batch * pages_per_req;
  const double bytes = double(batch) * kv_len * kSlotBytes * 2;
  std::vector<int> pages(num_pages);
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
  unsigned char *k, *v;
  int* d_pages;
  unsigned* sink;
  CHECK(cudaMalloc(&k, size_t(num_pages) * kPageBytes));
  CHECK(cudaMalloc(&v, size_t(num_pages) * kPageBytes));
  CHECK(cudaMemset(k, 1, size_t(num_pages) * kPageBytes));
  CHECK(cudaMemset(v, 2, size_t(num_pages) * kPageBytes));
  CHECK(cudaMalloc(&d_pages, pages.size() * sizeof(int)));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemcpy(d_pages, pages.data(), pages.size() * sizeof(int), cudaMemcpyHostToDevice));
  Params head{k, v, d_pages, pages_per_req, batch * kHeads * (kv_len / kUnitKeysHead), kHeads * (kv_len / kUnitKeysHead), sink};
  Params page{k, v, d_pages, pages_per_req, batch * (kv_len / kUnitKeysPage), kv_len / kUnitKeysPage, sink};
  std::printf("decode read ceilings: %d x %d, %.2f GB of K+V, pages of %d in shuffled order\n", batch, kv_len, bytes / 1e9, kPage);
  constexpr int kWarpStage = 32 * kRowBytes;
  for (int rep = 0; rep < 2; ++rep) {
    time_it("head-major bulk-rows, 2 stages", bulk_rows<2>, 4 * 2 * (kWarpStage + 8), head, bytes);
    time_it("head-major bulk-rows 272 B, 2 stages", bulk_rows<2, 272>, 4 * 2 * (32 * 272 + 8), head, bytes);
    time_it("head-major bulk-rows 288 B, 2 stages", bulk_rows<2, 288>, 4 * 2 * (32 * 288 + 8), head, bytes);
    time_it("head-major bulk-rows 384 B, 2 stages", bulk_rows<2, 384>, 4 * 2 * (32 * 384 + 8), head, bytes);
    time_it("head-major bulk-rows, 3 stages", bulk_rows<3>, 4 * 3 * (kWarpStage + 8), head, bytes);
    time_it("head-major bulk-rows, 4 stages", bulk_rows<4>, 4 * 4 * (kWarpStage + 8), head, bytes);
    time_it("head-major cp-async, 2 stages", cp_async_rows<2>, 4 * 2 * kWarpStage, head, bytes);
    time_it("head-major cp-async, 3 stages", cp_async_rows<3>, 4 * 3 * kWarpStage, head, bytes);
    time_it("head-major ldg, 16 a lane", ldg_rows, 0, head, bytes);
    time_it("head-major ldg, 16 a lane, 8 CTAs", ldg_rows, 100 * 1024 / 4, head, bytes);
    time_it("page-major bulk-page, 2 stages", bulk_pages<2, 1>, 2 * 2 * kPageBytes + 64, page, bytes);
    time_it("page-major bulk-page, 3 stages", bulk_pages<3, 1>, 3 * 2 * kPageBytes + 64, page, bytes);
    time_it("page-major bulk-slot, 3 stages", bulk_pages<3, 16>, 3 * 2 * kPageBytes + 64, page, bytes);
    time_it("page-major bulk 4KB, 3 stages", bulk_pages<3, 8>, 3 * 2 * kPageBytes + 64, page, bytes);
    time_it("page-major ldg-page", ldg_pages, 0, page, bytes);
  }
  return 0;
}
