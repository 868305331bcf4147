// The `mla` kernels' host side: the latent pool's tensor map (cuda/tensor_map.h), the launch of
// the kernel the plan's row tile names, and the combine kernel that joins the splits of a row
// tile (weights exp(lse_s - max) over its splits).
#include <cuda_bf16.h>

#include "attnkit/error.h"

#include "backends/mla/kernels/attend.h"
#include "backends/mla/kernels/attend_kernel.cuh"
#include "backends/mla/kernels/narrow_kernel.cuh"
#include "cuda/check.h"
#include "cuda/smem_opt_in.h"

namespace attnkit::mla {

namespace {

constexpr int kCombineThreads = kHeadDimVo / 4;  // four columns a thread

// One row of a merge a CTA: grid (num_merges, kTileRows).
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const AttendParams p) {
  if (static_cast<int>(blockIdx.x) >= p.counts[1]) return;  // past this plan's merges
  const MergeItem mi = p.merges[blockIdx.x];
  const int r = blockIdx.y;
  if (r >= mi.rows) return;
  float lse_max = -INFINITY;
  for (int s = 0; s < mi.num_splits; ++s) lse_max = fmaxf(lse_max, p.partial_lse[int64_t{mi.first_partial + s} * kTileRows + r]);
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float total = 0.0f;
  const int c = threadIdx.x * 4;
  for (int s = 0; s < mi.num_splits; ++s) {
    const int64_t row = int64_t{mi.first_partial + s} * kTileRows + r;
    const float lse = p.partial_lse[row];
    if (lse == -INFINITY) continue;
    const float wgt = __expf(lse - lse_max);
    const float4 v = *reinterpret_cast<const float4*>(p.partial_o + row * kHeadDimVo + c);
    acc.x += wgt * v.x;
    acc.y += wgt * v.y;
    acc.z += wgt * v.z;
    acc.w += wgt * v.w;
    total += wgt;
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  // total is the splits' weights relative to exp(lse_max): the row's LSE is lse_max + log(total).
  if (p.lse != nullptr && threadIdx.x == 0) {
    p.lse[int64_t{mi.q_row0} + r] = total > 0.0f ? lse_max + logf(total) : -INFINITY;
  }
  __nv_bfloat16* g_o = static_cast<__nv_bfloat16*>(p.out) + (int64_t{mi.q_row0} + r) * kHeadDimVo + c;
  reinterpret_cast<__nv_bfloat162*>(g_o)[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  reinterpret_cast<__nv_bfloat162*>(g_o)[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

}  // namespace

LatentMap make_latent_map(const void* pool, int64_t num_slots, int page_size, bool fp8_latent) {
  if (fp8_latent) {  // whole slots as 4-byte words, in pieces of kFp8PieceTokens
    const int box_rows = page_size < kFp8PieceTokens ? page_size : kFp8PieceTokens;
    return cuda::make_tensor_map("mla fp8_blocked latent pool", DType::f32, pool, {kFp8SlotBytes / 4, num_slots},
                                 {int64_t{kFp8SlotBytes}}, {kFp8SlotBytes / 4, box_rows});
  }
  const int box_rows = page_size < kTileTokens ? page_size : kTileTokens;
  return cuda::make_tensor_map("mla latent pool", DType::bf16, pool, {kHeadDimQk, num_slots}, {int64_t{kHeadDimQk} * 2},
                               {64, box_rows});
}

namespace {

// `smem_opt_in` is the kernel's own: its shared-memory opt-in is made at its first launch on each
// device.
template <typename Kernel>
void launch(Kernel kernel, cuda::SmemOptIn& smem_opt_in, int threads, int smem_bytes, const AttendParams& p,
            const LatentMap& map, cudaStream_t stream, const char* name) {
  smem_opt_in.ensure(reinterpret_cast<const void*>(kernel), smem_bytes);
  kernel<<<p.num_work, threads, smem_bytes, stream>>>(map, p);
  ATTNKIT_CUDA_CHECK_LAUNCH("mla ", name, ", ", p.num_work, " items");
}

template <int kN, bool kFp8>
void launch_narrow(const AttendParams& p, const LatentMap& map, cudaStream_t stream) {
  static cuda::SmemOptIn smem_opt_in;
  launch(narrow_kernel<kN, kFp8>, smem_opt_in, narrow_detail::Layout<kN, kFp8>::kThreads,
         narrow_detail::Layout<kN, kFp8>::kSmemBytes, p, map,
         stream, "narrow_kernel");
}

}  // namespace

void launch_attend(const AttendParams& p, const LatentMap& map, cudaStream_t stream) {
  if (p.num_work > 0) {
    if (p.tile_rows == 16) {
      if (p.fp8_latent) launch_narrow<16, true>(p, map, stream);
      else launch_narrow<16, false>(p, map, stream);
    } else if (p.tile_rows == 32 && p.fp8_latent) {
      launch_narrow<32, true>(p, map, stream);
    } else {
      ATTNKIT_CHECK(p.tile_rows == kTileRows && !p.fp8_latent, "mla: no kernel takes row tiles of ", p.tile_rows,
                    p.fp8_latent ? " on an fp8_blocked cache" : " on a bf16 cache");
      static cuda::SmemOptIn smem_opt_in;
      launch(attend_kernel, smem_opt_in, attend_detail::kThreads, attend_detail::kSmemBytes, p, map, stream, "attend_kernel");
    }
  }
  if (p.num_merges > 0) {
    combine_kernel<<<dim3(p.num_merges, kTileRows), kCombineThreads, 0, stream>>>(p);
    ATTNKIT_CUDA_CHECK_LAUNCH("mla combine_kernel, ", p.num_merges, " merges");
  }
}

}  // namespace attnkit::mla
