// The `mla` kernels' host side: the latent pool's tensor map, the attention launch and the combine
// kernel that joins the splits of a row tile (weights exp(lse_s - max) over its splits).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>

#include <cstring>
#include <mutex>

#include "backends/mla/kernels/attend.h"
#include "backends/mla/kernels/attend_kernel.cuh"
#include "cuda/check.h"

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
  __nv_bfloat16* g_o = static_cast<__nv_bfloat16*>(p.out) + (int64_t{mi.q_row0} + r) * kHeadDimVo + c;
  reinterpret_cast<__nv_bfloat162*>(g_o)[0] = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  reinterpret_cast<__nv_bfloat162*>(g_o)[1] = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    ATTNKIT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status));
    ATTNKIT_CHECK(status == cudaDriverEntryPointSuccess && f != nullptr,
                  "mla: the driver has no cuTensorMapEncodeTiled (a CUDA 12 driver or newer is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

LatentMap make_latent_map(const void* pool, int64_t num_slots, int page_size) {
  static_assert(sizeof(CUtensorMap) == sizeof(LatentMap), "LatentMap holds a CUtensorMap");
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(kHeadDimQk), static_cast<cuuint64_t>(num_slots)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(kHeadDimQk) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(page_size < kTileTokens ? page_size : kTileTokens)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(pool), dims, strides,
                                    box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  ATTNKIT_CHECK(r == CUDA_SUCCESS, "mla: cuTensorMapEncodeTiled failed (error ", static_cast<int>(r),
                ") for a latent pool of ", num_slots, " slots, page_size ", page_size);
  LatentMap out;
  std::memcpy(out.bytes, &map, sizeof(map));
  return out;
}

void launch_attend(const AttendParams& p, const LatentMap& map, cudaStream_t stream) {
  static std::once_flag attr_once;
  std::call_once(attr_once, [] {
    ATTNKIT_CUDA_CHECK(cudaFuncSetAttribute(attend_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            attend_detail::kSmemBytes));
  });
  if (p.num_work > 0) {
    attend_kernel<<<p.num_work, attend_detail::kThreads, attend_detail::kSmemBytes, stream>>>(map, p);
    ATTNKIT_CUDA_CHECK_LAUNCH("mla attend_kernel, ", p.num_work, " items");
  }
  if (p.num_merges > 0) {
    combine_kernel<<<dim3(p.num_merges, kTileRows), kCombineThreads, 0, stream>>>(p);
    ATTNKIT_CUDA_CHECK_LAUNCH("mla combine_kernel, ", p.num_merges, " merges");
  }
}

}  // namespace attnkit::mla
