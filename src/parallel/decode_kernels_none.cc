// Without CUDA no backend runs on a GPU, so neither context-parallel step takes its device path;
// the entry points say why if called.
#include "attnkit/error.h"
#include "parallel/decode_kernels.h"

namespace attnkit::parallel {
namespace {
[[noreturn]] void no_cuda() {
  throw Error("context parallel: this attnkit was built without CUDA (ATTNKIT_WITH_CUDA=OFF)");
}
}  // namespace

void gather_rows_cuda(const int32_t*, int64_t, const RowGather&, const RowGather&) { no_cuda(); }
void write_send_state_cuda(float*, const void*, DType, const float*, const int32_t*, int64_t, int, int) { no_cuda(); }
void merge_states_cuda(void*, DType, const float*, int, int64_t, int, int) { no_cuda(); }
void merge_partials_cuda(void*, DType, const void*, DType, const float*, const int32_t*, const int32_t*, int64_t, int,
                         int) {
  no_cuda();
}

}  // namespace attnkit::parallel
