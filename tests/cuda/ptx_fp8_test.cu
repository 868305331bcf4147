// The e4m3 wgmma path of the `hopper` kernel's fp8 products (cuda/wgmma_fp8.cuh) on the device:
// S = Q K^T from e4m3 tiles, V transposed into V^T with its tokens permuted, P packed to e4m3 straight
// from S's accumulator layout, and O = P V. Inputs are small integers, which e4m3 holds exactly, so
// every product is exact in f32 and compared exactly; P's factor (a power of two) too.
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/ptx_test_support.h"
#include "cuda/tma.cuh"
#include "cuda/wgmma_fp8.cuh"

namespace attnkit {
namespace {

namespace wg = ::attnkit::cuda::wgmma;

static_assert(wg::vt_token(0) == 0 && wg::vt_token(1) == 1 && wg::vt_token(2) == 8 && wg::vt_token(3) == 9 &&
                  wg::vt_token(4) == 2 && wg::vt_token(15) == 15 && wg::vt_token(16) == 16 && wg::vt_token(18) == 24,
              "a thread's accumulator columns 2q, 2q + 1, 8 + 2q, 9 + 2q sit at its positions 4q .. 4q + 3");

// The token order is a permutation of each 16.
TEST(PtxFp8, VtTokenIsAPermutation) {
  std::vector<int> seen(128, 0);
  for (int p = 0; p < 128; ++p) {
    const int t = wg::vt_token(p);
    ASSERT_EQ(t / 16, p / 16) << "position " << p;
    ++seen[static_cast<size_t>(t)];
  }
  for (int t = 0; t < 128; ++t) EXPECT_EQ(seen[static_cast<size_t>(t)], 1) << "token " << t;
}

constexpr uint32_t kTile = 128 * 128;  // one e4m3 tile: 128 rows of 128 bytes
constexpr uint32_t kQ = 0, kK = 64 * 128, kV = kK + kTile, kVt = kV + kTile, kBytes = kVt + kTile;

// q [64][128], k and v [128 tokens][128] as e4m3 bytes; p [64][128] floats. S and O written out in
// their accumulators' layout; V^T's bytes too, to check the transpose on its own.
__global__ void __launch_bounds__(128, 1)
    fp8_kernel(const uint8_t* q, const uint8_t* k, const uint8_t* v, const float* p, float p_factor, float* s_out,
               float* o_out, uint8_t* vt_out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  for (int i = tid; i < 64 * 128; i += 128) smem[kQ + wg::swizzled_byte(i / 128, i % 128)] = q[i];
  for (int i = tid; i < 128 * 128; i += 128) {
    smem[kK + wg::swizzled_byte(i / 128, i % 128)] = k[i];
    smem[kV + wg::swizzled_byte(i / 128, i % 128)] = v[i];
  }
  __syncthreads();
  wg::transpose_v_e4m3(smem + kV, smem + kVt, tid, 128, 128);
  wg::fence_proxy_async();
  __syncthreads();
  for (int i = tid; i < 128 * 128; i += 128) vt_out[i] = smem[kVt + wg::swizzled_byte(i / 128, i % 128)];
  const uint32_t base = ::attnkit::cuda::tma::smem_addr(smem);

  float s[64];
  wg::qk_ss_e4m3(s, base + kQ, base + kK);
  wg::wait<0>();
  wg::fence_regs(s);
  for (int i = 0; i < 64; ++i) s_out[acc_row(lane, warp, i) * 128 + acc_col(lane, i)] = s[i];

  // P in S's accumulator layout, divided by the factor pack_p_e4m3 multiplies back.
  float pa[64];
  for (int i = 0; i < 64; ++i) pa[i] = p[acc_row(lane, warp, i) * 128 + acc_col(lane, i)] / p_factor;
  uint32_t p8[4][4];
  wg::pack_p_e4m3(pa, p_factor, p8);
  float o[64];
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  wg::pv_rs_e4m3(o, p8, base + kVt);
  wg::wait<0>();
  wg::fence_regs(o);
  for (int i = 0; i < 64; ++i) o_out[acc_row(lane, warp, i) * 128 + acc_col(lane, i)] = o[i];
}

uint8_t to_e4m3(float x) { return __nv_fp8_e4m3(x).__x; }

TEST(PtxFp8, ProductsThroughPermutedTranspose) {
  SKIP_WITHOUT_HOPPER();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-3, 3), positive(0, 4);
  std::vector<float> q(64 * 128), k(128 * 128), v(128 * 128), p(64 * 128);
  for (float& e : q) e = static_cast<float>(small(rng));
  for (float& e : k) e = static_cast<float>(small(rng));
  for (float& e : v) e = static_cast<float>(small(rng));
  for (float& e : p) e = static_cast<float>(positive(rng));
  auto bytes = [](const std::vector<float>& x) {
    std::vector<uint8_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = to_e4m3(x[i]);
    return b;
  };
  const DeviceArray<uint8_t> dq(bytes(q)), dk(bytes(k)), dv(bytes(v));
  const DeviceArray<float> dp(p), ds(64 * 128), dout(64 * 128);
  const DeviceArray<uint8_t> dvt(128 * 128);
  CUDA_OK(cudaMemset(ds.ptr, 0xff, 64 * 128 * 4));
  CUDA_OK(cudaMemset(dout.ptr, 0xff, 64 * 128 * 4));
  CUDA_OK(cudaFuncSetAttribute(fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  constexpr float kFactor = 256.0f;  // the kernel's P scale: P / 256 times it gives back the integers exactly
  fp8_kernel<<<1, 128, kBytes>>>(dq.ptr, dk.ptr, dv.ptr, dp.ptr, kFactor, ds.ptr, dout.ptr, dvt.ptr);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> vt = dvt.to_host(), vb = bytes(v);
  for (int d = 0; d < 128; ++d)
    for (int pos = 0; pos < 128; ++pos)
      ASSERT_EQ(vt[d * 128 + pos], vb[wg::vt_token(pos) * 128 + d]) << "V^T row " << d << ", position " << pos;
  const std::vector<float> s = ds.to_host(), o = dout.to_host();
  for (int r = 0; r < 64; ++r)
    for (int n = 0; n < 128; ++n) {
      float want = 0.0f;
      for (int d = 0; d < 128; ++d) want += q[r * 128 + d] * k[n * 128 + d];
      ASSERT_EQ(s[r * 128 + n], want) << "S row " << r << ", column " << n;
    }
  for (int r = 0; r < 64; ++r)
    for (int d = 0; d < 128; ++d) {
      float want = 0.0f;
      for (int n = 0; n < 128; ++n) want += p[r * 128 + n] * v[n * 128 + d];
      ASSERT_EQ(o[r * 128 + d], want) << "O row " << r << ", column " << d;
    }
}

}  // namespace
}  // namespace attnkit
