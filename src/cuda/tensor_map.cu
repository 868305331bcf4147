// make_tensor_map through the driver's cuTensorMapEncodeTiled, found at run time (the runtime's
// entry-point query), so the library links no driver library.
#include "cuda/tensor_map.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstring>

#include "attnkit/error.h"
#include "cuda/check.h"

namespace attnkit::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    ATTNKIT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &status));
    ATTNKIT_CHECK(status == cudaDriverEntryPointSuccess && f != nullptr,
                  "the driver has no cuTensorMapEncodeTiled (a CUDA 12 driver or newer is needed)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

TensorMap make_tensor_map(const char* what, DType dtype, const void* base, std::initializer_list<int64_t> dims,
                          std::initializer_list<int64_t> strides_bytes, std::initializer_list<int> box) {
  static_assert(sizeof(CUtensorMap) == sizeof(TensorMap), "TensorMap holds a CUtensorMap");
  ATTNKIT_CHECK(dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f32 || dtype == DType::e4m3, what,
                ": tensor maps are made for bf16, f16, f32 or e4m3, got ", dtype_name(dtype));
  const bool raw = dtype == DType::f32;
  const int rank = static_cast<int>(dims.size());
  ATTNKIT_CHECK(rank >= 2 && rank <= 5 && static_cast<int>(strides_bytes.size()) == rank - 1 &&
                    static_cast<int>(box.size()) == rank,
                what, ": a tensor map needs rank 2..5 with rank - 1 strides and rank box sizes");
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], e[5];
  int i = 0;
  for (int64_t v : dims) d[i++] = static_cast<cuuint64_t>(v);
  i = 0;
  for (int64_t v : strides_bytes) s[i++] = static_cast<cuuint64_t>(v);
  i = 0;
  for (int v : box) {
    e[i] = 1;
    b[i++] = static_cast<cuuint32_t>(v);
  }
  CUtensorMap map;
  // e4m3 travels as raw bytes (the TMA does not convert).
  const CUtensorMapDataType type = raw                    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : dtype == DType::e4m3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                          : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult r = encode_tiled()(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, s, b, e,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, raw ? CU_TENSOR_MAP_SWIZZLE_NONE : CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  ATTNKIT_CHECK(r == CUDA_SUCCESS, what, ": cuTensorMapEncodeTiled failed (error ", static_cast<int>(r), ")");
  TensorMap out;
  std::memcpy(out.bytes, &map, sizeof(map));
  return out;
}

}  // namespace attnkit::cuda
