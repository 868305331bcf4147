// The context-parallel steps' kernels (decode_kernels.h): small, memory-bound launches around the
// backends', each one launch so that a step is a fixed sequence a CUDA graph can hold.
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

unsigned blocks_for(int64_t n, int64_t per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

// Calls fn(T{}) with T the element type of `dtype`, one of kRowDtypes; else throws naming `field`.
template <typename Fn>
void with_element_type(DType dtype, const char* field, Fn&& fn) {
  const bool found = cuda::pick<kRowDtypes>(dtype, [&](auto d) { fn(typename cuda::ElementType<d.value>::type{}); });
  ATTNKIT_CHECK(found, "context parallel: ", field, " dtype must be f32, f16 or bf16, got ", dtype_name(dtype));
}

// Row i of side s (0: a, 1: b) is dst[s] row i = src[s] row rows[i] (zeros where rows[i] < 0),
// rows dst_stride[s] and src_stride[s] elements apart.
template <typename Dst, typename Src>
struct GatherParams {
  Dst* dst[2];
  const Src* src[2];
  int64_t row_elems[2], dst_stride[2], src_stride[2];
  const int32_t* rows;  // [count]
};

// One block a (row, side), blockIdx.y the side. A decode step moves one row a request, so the
// launch, not the bytes, is the cost: K and V share one.
template <typename Dst, typename Src>
__global__ void gather_rows_kernel(GatherParams<Dst, Src> p) {
  // Selected, not indexed by blockIdx.y: a runtime index into the parameters would copy them to
  // local memory.
  const bool b = blockIdx.y != 0;
  const int64_t i = blockIdx.x, row = p.rows[i], row_elems = b ? p.row_elems[1] : p.row_elems[0];
  Dst* dst = (b ? p.dst[1] : p.dst[0]) + i * (b ? p.dst_stride[1] : p.dst_stride[0]);
  if (row < 0) {  // padding: written, so that the bytes a rank sends are the same run to run
    for (int64_t e = threadIdx.x; e < row_elems; e += blockDim.x) dst[e] = from_float<Dst>(0.0f);
    return;
  }
  const Src* src = (b ? p.src[1] : p.src[0]) + row * (b ? p.src_stride[1] : p.src_stride[0]);
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

// The states a merge folds for (row, head) pair `pair` (row * num_heads + head): count(row) of them,
// state s's lse and its o [head_dim].
//
// Decode's: num_states states one after another, each lse [num_rows, num_heads] then
// o [num_rows, num_heads, head_dim], f32.
struct StackedStates {
  const float* g_states;
  int num_states;
  int64_t state_floats, o_begin;  // num_rows * num_heads * (head_dim + 1); num_rows * num_heads
  int head_dim;
  __device__ int count(int64_t) const { return num_states; }
  __device__ float lse(int64_t, int64_t pair, int s) const { return g_states[s * state_floats + pair]; }
  __device__ const float* o(int64_t, int64_t pair, int s) const {
    return g_states + s * state_floats + o_begin + pair * head_dim;
  }
};

// Prefill's: row r's states are the partial rows g_parts[g_indptr[r] ..) of g_lse [*, num_heads]
// and g_o [*, num_heads, head_dim].
template <typename O>
struct IndexedStates {
  const O* g_o;
  const float* g_lse;
  const int32_t* g_indptr;
  const int32_t* g_parts;
  int num_heads, head_dim;
  __device__ int count(int64_t row) const { return g_indptr[row + 1] - g_indptr[row]; }
  __device__ int64_t part(int64_t row, int64_t pair, int s) const {
    return int64_t{g_parts[g_indptr[row] + s]} * num_heads + pair % num_heads;
  }
  __device__ float lse(int64_t row, int64_t pair, int s) const { return g_lse[part(row, pair, s)]; }
  __device__ const O* o(int64_t row, int64_t pair, int s) const { return g_o + part(row, pair, s) * head_dim; }
};

// One warp a (row, head), a lane every 32nd element of it. Each lane folds the states in their
// order as merge_states does (the largest LSE found first, then the weights e^(lse - max) summed
// in double), so every element, and every rank's merge of the same states, is computed alike.
template <typename Out, typename States>
__global__ void merge_states_kernel(Out* __restrict__ g_out, States states, int64_t num_rows, int num_heads,
                                    int head_dim) {
  const int64_t pair = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32;  // row * num_heads + head
  if (pair >= num_rows * num_heads) return;
  const int64_t row = pair / num_heads;
  const int lane = threadIdx.x % 32, num_states = states.count(row);
  Out* out = g_out + pair * head_dim;
  float m = -INFINITY;
  for (int s = 0; s < num_states; ++s) m = fmaxf(m, states.lse(row, pair, s));
  if (m == -INFINITY) {  // every state empty: -inf - -inf would be NaN, so the output is zero
    for (int e = lane; e < head_dim; e += 32) out[e] = from_float<Out>(0.0f);
    return;
  }
  double sum = 0.0;
  for (int s = 0; s < num_states; ++s) sum += expf(states.lse(row, pair, s) - m);
  const float inv = static_cast<float>(1.0 / sum);
  for (int e = lane; e < head_dim; e += 32) {
    float acc = 0.0f;
    for (int s = 0; s < num_states; ++s) {
      const float lse = states.lse(row, pair, s);
      if (lse == -INFINITY) continue;  // an empty state adds nothing (its o is 0, never read)
      acc += expf(lse - m) * to_float(states.o(row, pair, s)[e]);
    }
    out[e] = from_float<Out>(acc * inv);
  }
}

// Launches the merge of `states` into out (f32, f16 or bf16).
template <typename States>
void launch_merge(void* out, DType out_dtype, const States& states, int64_t num_rows, int num_heads, int head_dim) {
  with_element_type(out_dtype, "out", [&](auto out_type) {
    using Out = decltype(out_type);
    merge_states_kernel<<<blocks_for(num_rows * num_heads, kWarps), kThreads>>>(static_cast<Out*>(out), states,
                                                                               num_rows, num_heads, head_dim);
  });
}

}  // namespace

void gather_rows_cuda(const int32_t* rows, int64_t count, const RowGather& a, const RowGather& b) {
  if (count == 0) return;
  ATTNKIT_CHECK(b.dst == nullptr || (b.dst_dtype == a.dst_dtype && b.src_dtype == a.src_dtype),
                "context parallel: a two-sided gather converts one pair of dtypes, got ",
                dtype_name(a.src_dtype), " -> ", dtype_name(a.dst_dtype), " and ", dtype_name(b.src_dtype), " -> ",
                dtype_name(b.dst_dtype));
  with_element_type(a.dst_dtype, "gathered row", [&](auto dst_type) {
    with_element_type(a.src_dtype, "source row", [&](auto src_type) {
      using Dst = decltype(dst_type);
      using Src = decltype(src_type);
      auto stride = [](int64_t given, int64_t row_elems) { return given != 0 ? given : row_elems; };
      const GatherParams<Dst, Src> p{{static_cast<Dst*>(a.dst), static_cast<Dst*>(b.dst)},
                                     {static_cast<const Src*>(a.src), static_cast<const Src*>(b.src)},
                                     {a.row_elems, b.row_elems},
                                     {stride(a.dst_stride, a.row_elems), stride(b.dst_stride, b.row_elems)},
                                     {stride(a.src_stride, a.row_elems), stride(b.src_stride, b.row_elems)},
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
  const int64_t pairs = num_rows * num_heads;
  launch_merge(out, out_dtype, StackedStates{states, num_states, pairs * (head_dim + 1), pairs, head_dim}, num_rows,
               num_heads, head_dim);
  ATTNKIT_CUDA_CHECK_LAUNCH("merge_states_kernel [", num_states, " states of ", num_rows, " rows x ", num_heads,
                            " heads x ", head_dim, "]");
}

void merge_partials_cuda(void* out, DType out_dtype, const void* o, DType o_dtype, const float* lse,
                         const int32_t* indptr, const int32_t* parts, int64_t num_rows, int num_heads, int head_dim) {
  if (num_rows == 0) return;
  with_element_type(o_dtype, "partial output", [&](auto o_type) {
    using O = decltype(o_type);
    launch_merge(out, out_dtype, IndexedStates<O>{static_cast<const O*>(o), lse, indptr, parts, num_heads, head_dim},
                 num_rows, num_heads, head_dim);
  });
  ATTNKIT_CUDA_CHECK_LAUNCH("merge_states_kernel [", num_rows, " rows of their own states x ", num_heads, " heads x ",
                            head_dim, "]");
}

}  // namespace attnkit::parallel
