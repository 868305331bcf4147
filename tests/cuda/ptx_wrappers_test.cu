// The sm_90a wrappers the `hopper` and `mla` kernels are built from, each on its own on the device:
// mbarrier phases (cuda/tma.cuh), TMA boxes of a tensor map landing 128-byte swizzled
// (cuda/tensor_map.h, cuda/tma.cuh), the wgmma descriptors and register layouts of S = Q K^T and
// O += P V (cuda/wgmma.cuh, cuda/wgmma_ops.cuh), and setmaxnreg (cuda/setmaxnreg.cuh). Inputs are
// small integers, so every product is exact in f32 and every element is compared exactly.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "attnkit/tensor.h"
#include "cuda/memory.h"
#include "cuda/row_math.cuh"
#include "cuda/setmaxnreg.cuh"
#include "cuda/tensor_map.h"
#include "cuda/tma.cuh"
#include "cuda/wgmma_ops.cuh"
#include "cuda/ptx_test_support.h"

namespace attnkit {
namespace {

// Where element (row, col) of a tile of 128-byte rows (64 two-byte values) lies in shared memory
// under the 128-byte swizzle: 16-byte piece col / 8 of row `row` at piece (col / 8) ^ (row % 8);
// column blocks of 64 values `block_bytes` apart. The layout the TMA writes and wgmma reads.
__host__ __device__ inline uint32_t swizzled(int row, int col, uint32_t block_bytes) {
  return static_cast<uint32_t>((col / 64) * block_bytes + row * 128 + ((((col % 64) / 8) ^ (row % 8)) * 16) +
                               (col % 8) * 2);
}

// ---------------------------------------------------------------------------------------------
// mbarrier: a barrier of 4 arrivals completes a phase each time every warp has arrived, its parity
// alternating from 0; a fresh barrier's phase of parity 1 counts as completed.

// kPtxLoop: the wait that loops in PTX (mbar_wait_in_ptx), which may sit between the wgmma
// instructions of one group, instead of mbar_wait.
template <bool kPtxLoop>
__global__ void mbarrier_kernel(int* out, int phases) {
  namespace tma = ::attnkit::cuda::tma;
  __shared__ __align__(8) uint64_t bar;
  __shared__ int count;
  const uint32_t b = tma::smem_addr(&bar);
  if (threadIdx.x == 0) {
    tma::mbar_init(b, 4);
    count = 0;
  }
  __syncthreads();
  auto wait = [b](uint32_t parity) {
    if constexpr (kPtxLoop) {
      tma::mbar_wait_in_ptx(b, parity);
    } else {
      tma::mbar_wait(b, parity);
    }
  };
  wait(1);  // a fresh barrier: passes at once
  for (int ph = 0; ph < phases; ++ph) {
    if (threadIdx.x % 32 == 0) {
      atomicAdd(&count, 1);
      tma::mbar_arrive(b);
    }
    wait(ph & 1);
    // Every warp arrived before any thread passed: all 4 increments of this phase are visible.
    if (count < 4 * (ph + 1)) atomicAdd(out, 1);
    __syncthreads();
  }
}

TEST(PtxMbarrier, CompletesAPhaseWhenEveryArrivalIsIn) {
  SKIP_WITHOUT_HOPPER();
  DeviceArray<int> out(1);
  CUDA_OK(cudaMemset(out.ptr, 0, sizeof(int)));
  mbarrier_kernel<false><<<1, 128>>>(out.ptr, 5);
  mbarrier_kernel<true><<<1, 128>>>(out.ptr, 5);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(out.to_host()[0], 0) << "threads passed a phase before every warp had arrived";
}

// ---------------------------------------------------------------------------------------------
// TMA: a box of a 2-D and of a 3-D tensor map lands in shared memory 128-byte swizzled, its bytes
// counted on the barrier (expect-tx).

template <int kDims>
__global__ void tma_box_kernel(const __grid_constant__ cuda::TensorMap map, uint16_t* out, int c0, int c1, int c2,
                               uint32_t bytes) {
  namespace tma = ::attnkit::cuda::tma;
  extern __shared__ __align__(1024) unsigned char smem[];  // the box, then the barrier
  const uint32_t dst = tma::smem_addr(smem);
  const uint32_t b = dst + bytes;
  if (threadIdx.x == 0) {
    tma::mbar_init(b, 1);
    tma::mbar_expect_tx(b, bytes);
    if constexpr (kDims == 2) {
      tma::load_2d(dst, &map, c0, c1, b);
    } else {
      tma::load_3d(dst, &map, c0, c1, c2, b);
    }
  }
  __syncthreads();
  tma::mbar_wait(b, 0);
  for (uint32_t i = threadIdx.x; i < bytes / 2; i += blockDim.x) out[i] = reinterpret_cast<const uint16_t*>(smem)[i];
}

// `host` on the device, one box of `box_rows` 128-byte rows loaded from the map `make_map` builds
// over it, at coordinates (c0, c1, c2): the box as shared memory held it, into `got`.
template <int kDims, typename MakeMap>
void land_box(const std::vector<uint16_t>& host, MakeMap make_map, int c0, int c1, int c2, int box_rows,
              std::vector<uint16_t>* got) {
  const DeviceArray<uint16_t> in(host);
  const DeviceArray<uint16_t> out(static_cast<size_t>(box_rows) * 64);
  const cuda::TensorMap map = make_map(in.ptr);
  const uint32_t bytes = static_cast<uint32_t>(box_rows) * 128;
  tma_box_kernel<kDims><<<1, 128, bytes + 8>>>(map, out.ptr, c0, c1, c2, bytes);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  *got = out.to_host();
}

TEST(PtxTma, TwoDimensionalBoxLandsSwizzled) {
  SKIP_WITHOUT_HOPPER();
  constexpr int kRows = 64, kCols = 128, kBoxRows = 32;
  std::vector<uint16_t> host(kRows * kCols);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) host[r * kCols + c] = static_cast<uint16_t>(r << 8 | c);
  std::vector<uint16_t> got;
  ASSERT_NO_FATAL_FAILURE(land_box<2>(
      host,
      [](const void* in) {
        return cuda::make_tensor_map("test 2-d", DType::bf16, in, {kCols, kRows}, {kCols * 2}, {64, kBoxRows});
      },
      64, 8, 0, kBoxRows, &got));
  for (int r = 0; r < kBoxRows; ++r)
    for (int c = 0; c < 64; ++c)
      ASSERT_EQ(got[swizzled(r, c, 0) / 2], host[(8 + r) * kCols + 64 + c]) << "box row " << r << ", column " << c;
}

// The pool layout of the `hopper` kernel: [slots][heads][dim], a box of `rows` slots of one head.
TEST(PtxTma, PoolBoxTakesOneHeadOfConsecutiveSlots) {
  SKIP_WITHOUT_HOPPER();
  constexpr int kDim = 64, kHeads = 4, kSlots = 48, kBoxRows = 16;
  std::vector<uint16_t> host(kSlots * kHeads * kDim);
  for (int s = 0; s < kSlots; ++s)
    for (int h = 0; h < kHeads; ++h)
      for (int d = 0; d < kDim; ++d) host[(s * kHeads + h) * kDim + d] = static_cast<uint16_t>(s << 8 | h << 6 | d);
  std::vector<uint16_t> got;
  ASSERT_NO_FATAL_FAILURE(land_box<3>(
      host,
      [](const void* in) {
        constexpr int64_t kRow = kDim * 2;
        return cuda::make_tensor_map("test pool", DType::bf16, in, {kDim, kHeads, kSlots}, {kRow, kRow * kHeads},
                                     {64, 1, kBoxRows});
      },
      0, 2, 24, kBoxRows, &got));
  for (int r = 0; r < kBoxRows; ++r)
    for (int d = 0; d < 64; ++d)
      ASSERT_EQ(got[swizzled(r, d, 0) / 2], host[((24 + r) * kHeads + 2) * kDim + d]) << "slot " << 24 + r << ", value " << d;
}

// ---------------------------------------------------------------------------------------------
// wgmma: one warpgroup computes S = Q K^T (both K-major in shared memory, qk_ss) and then
// O = P V (P from registers in the layout of S's accumulator, V MN-major, pv_rs), as the extend
// kernels do; the accumulators are written out in their documented layout (acc_row, acc_col).

template <int kN, int kD>
struct WgmmaLayout {
  static constexpr uint32_t kQBlock = 64 * 128;         // Q: 64 rows, column blocks 8 KB apart
  static constexpr uint32_t kKBlock = kN * 128;         // K and V: kN rows
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQBlock * (kD / 64);
  static constexpr uint32_t kV = kK + kKBlock * (kD / 64);
  static constexpr uint32_t kBytes = kV + kKBlock * (kD / 64);
};

template <int kN, int kD>
__global__ void __launch_bounds__(128, 1)
    wgmma_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* p,
                 float* s_out, float* o_out) {
  namespace wg = ::attnkit::cuda::wgmma;
  using L = WgmmaLayout<kN, kD>;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // Operands into their swizzled places with generic stores, then fenced for the async proxy.
  for (int i = tid; i < 64 * kD; i += 128)
    *reinterpret_cast<__nv_bfloat16*>(smem + L::kQ + swizzled(i / kD, i % kD, L::kQBlock)) = q[i];
  for (int i = tid; i < kN * kD; i += 128) {
    *reinterpret_cast<__nv_bfloat16*>(smem + L::kK + swizzled(i / kD, i % kD, L::kKBlock)) = k[i];
    *reinterpret_cast<__nv_bfloat16*>(smem + L::kV + swizzled(i / kD, i % kD, L::kKBlock)) = v[i];
  }
  wg::fence_proxy_async();
  __syncthreads();
  const uint32_t base = ::attnkit::cuda::tma::smem_addr(smem);

  float s[kN / 2];
  wg::qk_ss<__nv_bfloat16, kN, kD>(s, base + L::kQ, L::kQBlock, base + L::kK);
  wg::wait<0>();
  wg::fence_regs(s);
  for (int i = 0; i < kN / 2; ++i) s_out[acc_row(lane, warp, i) * kN + acc_col(lane, i)] = s[i];

  // P's A fragments, read from p [64][kN] through the same layout (pack_p's mapping of S).
  uint32_t pa[kN / 16][4];
  for (int kk = 0; kk < kN / 16; ++kk)
    for (int f = 0; f < 4; ++f) {
      const int i = 8 * kk + 2 * f;  // the accumulator elements i and i + 1 make fragment f of step kk
      pa[kk][f] = ::attnkit::cuda::pack2<__nv_bfloat16>(__bfloat162float(p[acc_row(lane, warp, i) * kN + acc_col(lane, i)]),
                                                       __bfloat162float(p[acc_row(lane, warp, i + 1) * kN + acc_col(lane, i + 1)]));
    }
  float o[kD / 2];
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
  wg::pv_rs<__nv_bfloat16, kN, kD>(o, pa, base + L::kV);
  wg::wait<0>();
  wg::fence_regs(o);
  for (int i = 0; i < kD / 2; ++i) o_out[acc_row(lane, warp, i) * kD + acc_col(lane, i)] = o[i];
}

template <int kN, int kD>
void check_wgmma() {
  using L = WgmmaLayout<kN, kD>;
  std::mt19937 rng(kN * 1000 + kD);
  std::uniform_int_distribution<int> small(-2, 2), positive(0, 2);
  auto fill = [&](std::vector<float>& x, size_t n, bool pos) {
    x.resize(n);
    for (float& e : x) e = static_cast<float>(pos ? positive(rng) : small(rng));
  };
  std::vector<float> q, k, v, p;
  fill(q, 64 * kD, false);
  fill(k, kN * kD, false);
  fill(v, kN * kD, false);
  fill(p, 64 * kN, true);
  auto upload = [](const std::vector<float>& x) {
    std::vector<__nv_bfloat16> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = __float2bfloat16(x[i]);
    return b;
  };
  const DeviceArray<__nv_bfloat16> dq(upload(q)), dk(upload(k)), dv(upload(v)), dp(upload(p));
  const DeviceArray<float> ds(64 * kN), dout(64 * kD);
  // Poisoned: an element the kernel does not write shows as NaN.
  CUDA_OK(cudaMemset(ds.ptr, 0xff, 64 * kN * 4));
  CUDA_OK(cudaMemset(dout.ptr, 0xff, 64 * kD * 4));
  CUDA_OK(cudaFuncSetAttribute(wgmma_kernel<kN, kD>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes));
  wgmma_kernel<kN, kD><<<1, 128, L::kBytes>>>(dq.ptr, dk.ptr, dv.ptr, dp.ptr, ds.ptr, dout.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> s = ds.to_host(), o = dout.to_host();
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < kN; ++n) {
      float want = 0.0f;
      for (int d = 0; d < kD; ++d) want += q[r * kD + d] * k[n * kD + d];
      ASSERT_EQ(s[r * kN + n], want) << "S row " << r << ", column " << n;
    }
  for (int r = 0; r < 64; ++r)
    for (int d = 0; d < kD; ++d) {
      float want = 0.0f;
      for (int n = 0; n < kN; ++n) want += p[r * kN + n] * v[n * kD + d];
      ASSERT_EQ(o[r * kD + d], want) << "O row " << r << ", column " << d;
    }
}

// A k-step's descriptor made by one add to the first's low word equals the one made from its
// address, over the whole shared window and the offsets the kernels step by (no GPU needed).
TEST(PtxWgmma, AdvancedDescriptorIsTheAddressOwn) {
  using attnkit::cuda::wgmma::advance_desc;
  using attnkit::cuda::wgmma::make_desc;
  for (uint32_t addr = 0; addr < 232 * 1024; addr += 1024) {
    for (uint32_t bytes : {0u, 32u, 64u, 96u, 2048u, 8192u, 16384u, 16416u, 30720u}) {
      if (addr + bytes >= (1u << 18)) continue;
      for (uint32_t leading : {16u, 8192u, 16384u}) {
        ASSERT_EQ(advance_desc(make_desc(addr, leading, 1024), bytes), make_desc(addr + bytes, leading, 1024))
            << "address " << addr << " + " << bytes << ", leading " << leading;
      }
    }
  }
}

TEST(PtxWgmma, ProductsOfSixtyFourKeysAndValues) {
  SKIP_WITHOUT_HOPPER();
  check_wgmma<64, 64>();
}

TEST(PtxWgmma, ProductsOfOneHundredTwentyEightKeysAndValues) {
  SKIP_WITHOUT_HOPPER();
  check_wgmma<128, 128>();
}

// The `hopper` d128 kernel's tiles of 192 keys: S on m64n192k16.
TEST(PtxWgmma, ProductsOfOneHundredNinetyTwoKeys) {
  SKIP_WITHOUT_HOPPER();
  check_wgmma<192, 128>();
}

// ---------------------------------------------------------------------------------------------
// setmaxnreg: warpgroup 0 gives registers back, warpgroups 1 and 2 take them (the `hopper`
// kernel's split); each then computes what it would have without the move.

__global__ void __launch_bounds__(384, 1) setmaxnreg_kernel(float* out) {
  const int warpgroup = threadIdx.x / 128;
  float acc[64];
  if (warpgroup == 0) {
    ::attnkit::cuda::lower_registers<40>();
  } else {
    ::attnkit::cuda::raise_registers<232>();
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = static_cast<float>(threadIdx.x + i);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; ++i) sum += acc[i] * acc[(i * 7) % 64];
  out[threadIdx.x] = sum;
}

TEST(PtxSetmaxnreg, WarpgroupsRunOnTheirNewBudgets) {
  SKIP_WITHOUT_HOPPER();
  DeviceArray<float> out(384);
  setmaxnreg_kernel<<<1, 384>>>(out.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got = out.to_host();
  for (int t = 0; t < 384; ++t) {
    float want = 0.0f;
    for (int i = 0; i < 64; ++i) want += static_cast<float>(t + i) * static_cast<float>(t + (i * 7) % 64);
    ASSERT_EQ(got[t], want) << "thread " << t;
  }
}

}  // namespace
}  // namespace attnkit
