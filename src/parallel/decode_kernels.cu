// The context-parallel decode step's kernels (decode_kernels.h): small, memory-bound launches
// around the backend's, each one launch so that a step is a fixed sequence a CUDA graph can hold.
#include <array>
#include <cmath>
#include <string>

#include "attnkit/error.h"
#include "cuda/check.h"
#include "cuda/convert.cuh"
#include "cuda/pick.cuh"
#include "parallel/decode_kernels.h"

namespace attnkit::parallel {
namespace {

using cuda::from_float;
using cuda::to_float;

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
inline constexpr std::array<DType, 3> kRowDtypes = {DType::f32, DType::f16, DType::bf16};

// Calls fn(T{}) with T the element type of `dtype`, one of kRowDtypes; else throws naming `field`.
template <typename Fn>
void with_element_type(DType dtype, const char* field, Fn&& fn) {
  const bool found = cuda::pick<kRowDtypes>(dtype, [&](auto d) { fn(typename cuda::ElementType<d.value>::type{}); });
  ATTNKIT_CHECK(found, "context parallel decode: ", field, " dtype must be f32, f16 or bf16, got ", dtype_name(dtype));
}

// Row i of side s (0: a, 1: b) is dst[s] row i = src[s] row rows[i].
template <typename Dst, typename Src>
struct GatherParams {
  Dst* dst[2];           // [count, row_elems[s]]
  const Src* src[2];     // [*, row_elems[s]]
  int64_t row_elems[2];
  const int32_t* rows;   // [count]
};

// One block a (row, side), blockIdx.y the side. A decode step moves one row a request, so the
// launch, not the bytes, is the cost: K and V share one.
template <typename Dst, typename Src>
__global__ void gather_rows_kernel(GatherParams<Dst, Src> p) {
  // Selected, not indexed by blockIdx.y: a runtime index into the parameters would copy them to
  // local memory.
  const bool b = blockIdx.y != 0;
  const int64_t i = blockIdx.x, row_elems = b ? p.row_elems[1] : p.row_elems[0];
  const Src* src = (b ? p.src[1] : p.src[0]) + int64_t{p.rows[i]} * row_elems;
  Dst* dst = (b ? p.dst[1] : p.dst[0]) + i * row_elems;
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) dst[e] = from_float<Dst>(to_float(src[e]));
}

// One block a global row: its lse and o from the local row that holds it, or the empty state.
template <typename O>
__global__ void send_state_kernel(float* __restrict__ g_state, const O* __restrict__ g_o,
                                  const float* __restrict__ g_lse, const int32_t* __restrict__ g_local_of_row,
                                  int64_t num_rows, int num_heads, int head_dim) {
  const int64_t row = blockIdx.x;
  const int64_t local = g_local_of_row[row];
  const int64_t row_elems = int64_t{num_heads} * head_dim;
  float* g_row_lse = g_state + row * num_heads;                       // [num_heads]
  float* g_row_o = g_state + num_rows * num_heads + row * row_elems;  // [num_heads, head_dim]
  for (int h = threadIdx.x; h < num_heads; h += blockDim.x) {
    g_row_lse[h] = local >= 0 ? g_lse[local * num_heads + h] : -INFINITY;
  }
  for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
    g_row_o[e] = local >= 0 ? to_float(g_o[local * row_elems + e]) : 0.0f;
  }
}

// One warp a (row, head), a lane every 32nd element of it. Each lane folds the states in their
// order as merge_states does (the largest LSE found first, then the weights e^(lse - max) summed
// in double), so every element, and every rank's merge of the same states, is computed alike.
template <typename Out>
__global__ void merge_states_kernel(Out* __restrict__ g_out, const float* __restrict__ g_states, int num_states,
                                    int64_t num_rows, int num_heads, int head_dim) {
  const int64_t pair = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;  // row * num_heads + head
  if (pair >= num_rows * num_heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t state_floats = num_rows * num_heads * (int64_t{head_dim} + 1);
  const int64_t o_begin = num_rows * num_heads + pair * head_dim;
  Out* out = g_out + pair * head_dim;
  float m = -INFINITY;
  for (int s = 0; s < num_states; ++s) m = fmaxf(m, g_states[s * state_floats + pair]);
  if (m == -INFINITY) {  // every state empty: -inf - -inf would be NaN, so the output is zero
    for (int e = lane; e < head_dim; e += 32) out[e] = from_float<Out>(0.0f);
    return;
  }
  double sum = 0.0;
  for (int s = 0; s < num_states; ++s) sum += expf(g_states[s * state_floats + pair] - m);
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = lane; e < head_dim; e += 32) {
    float acc = 0.0f;
    for (int s = 0; s < num_states; ++s) {
      const float lse = g_states[s * state_floats + pair];
      if (lse == -INFINITY) continue;  // an empty state adds nothing (its o is 0, never read)
      acc += expf(lse - m) * g_states[s * state_floats + o_begin + e];
    }
    out[e] = from_float<Out>(acc * inv);
  }
}

unsigned blocks_for(int64_t n, int64_t per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

}  // namespace

void gather_rows_cuda(const int32_t* rows, int64_t count, const RowGather& a, const RowGather& b) {
  if (count == 0) return;
  ATTNKIT_CHECK(b.dst == nullptr || (b.dst_dtype == a.dst_dtype && b.src_dtype == a.src_dtype),
                "context parallel decode: a two-sided gather converts one pair of dtypes, got ",
                dtype_name(a.src_dtype), " -> ", dtype_name(a.dst_dtype), " and ", dtype_name(b.src_dtype), " -> ",
                dtype_name(b.dst_dtype));
  with_element_type(a.dst_dtype, "gathered row", [&](auto dst_type) {
    with_element_type(a.src_dtype, "source row", [&](auto src_type) {
      using Dst = decltype(dst_type);
      using Src = decltype(src_type);
      const GatherParams<Dst, Src> p{{static_cast<Dst*>(a.dst), static_cast<Dst*>(b.dst)},
                                     {static_cast<const Src*>(a.src), static_cast<const Src*>(b.src)},
                                     {a.row_elems, b.row_elems},
                                     rows};
      const dim3 grid(static_cast<unsigned>(count), b.dst == nullptr ? 1u : 2u);
      gather_rows_kernel<<<grid, kThreads>>>(p);
    });
  });
  ATTNKIT_CUDA_CHECK_LAUNCH("gather_rows_kernel [", count, " rows x ", a.row_elems, b.dst ? " and " : "",
                            b.dst ? std::to_string(b.row_elems) : "", " elements]");
}

void write_send_state_cuda(float* state, const void* o, DType o_dtype, const float* lse,
                           const int32_t* local_of_row, int64_t num_rows, int num_heads, int head_dim) {
  if (num_rows == 0) return;
  with_element_type(o_dtype, "partial output", [&](auto o_type) {
    using O = decltype(o_type);
    send_state_kernel<<<static_cast<unsigned>(num_rows), kThreads>>>(state, static_cast<const O*>(o), lse,
                                                                    local_of_row, num_rows, num_heads, head_dim);
  });
  ATTNKIT_CUDA_CHECK_LAUNCH("send_state_kernel [", num_rows, " rows x ", num_heads, " heads x ", head_dim, "]");
}

void merge_states_cuda(void* out, DType out_dtype, const float* states, int num_states, int64_t num_rows,
                       int num_heads, int head_dim) {
  if (num_rows == 0) return;
  with_element_type(out_dtype, "out", [&](auto out_type) {
    using Out = decltype(out_type);
    merge_states_kernel<<<blocks_for(num_rows * num_heads, kWarps), kThreads>>>(
        static_cast<Out*>(out), states, num_states, num_rows, num_heads, head_dim);
  });
  ATTNKIT_CUDA_CHECK_LAUNCH("merge_states_kernel [", num_states, " states of ", num_rows, " rows x ", num_heads,
                            " heads x ", head_dim, "]");
}

}  // namespace attnkit::parallel
