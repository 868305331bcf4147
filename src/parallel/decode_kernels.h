// The device side of ContextParallelDecode (decode.cc) and ContextParallelPrefill
// (prefill_device.cc): row gathers by index, a decode rank's send state and the merges of partial
// states, one launch each. decode_kernels.cu in the CUDA build; without CUDA,
// decode_kernels_none.cc throws (no backend can be on a GPU there).
//
// Every launch goes to the calling thread's default stream: the backends and the cache store
// queue their kernels there (libattnkit is built with --default-stream=per-thread, and the
// backend interface names no stream), so the step is ordered after them with no host wait.
#pragma once

#include <cstdint>

#include "attnkit/dtype.h"

namespace attnkit::parallel {

// One side of a row gather: dst row i = src row rows[i], converted from src's dtype to dst's
// (f32, f16 or bf16 each), or zeros where rows[i] is -1. Rows are row_elems elements long and
// stride elements apart (0: row_elems), so a side can be the K or the V part of rows that hold both.
struct RowGather {
  void* dst = nullptr;        // [count] rows, device; null: no such side
  DType dst_dtype = DType::f32;
  const void* src = nullptr;  // device
  DType src_dtype = DType::f32;
  int64_t row_elems = 0;
  int64_t dst_stride = 0, src_stride = 0;
};

// `rows` [count] device: the same source rows of one or two sides (K and V) in one launch.
void gather_rows_cuda(const int32_t* rows, int64_t count, const RowGather& a, const RowGather& b = {});

// A rank's state of every global row, as ContextParallelDecode all-gathers it (f32): state =
// lse [num_rows, num_heads], then o [num_rows, num_heads, head_dim]. Row r is local row
// local_of_row[r] of o [*, num_heads, head_dim] (o_dtype) and lse [*, num_heads] (f32), or empty
// (lse -inf, o 0) where local_of_row[r] is -1.
void write_send_state_cuda(float* state, const void* o, DType o_dtype, const float* lse,
                           const int32_t* local_of_row, int64_t num_rows, int num_heads, int head_dim);

// out [num_rows, num_heads, head_dim] (out_dtype: f32, f16 or bf16) = merge_states
// (attnkit/merge.h) of the num_states states laid out as above, one after another in `states`:
// natural-log LSE, empty states contribute nothing, the states folded in their order (so every
// rank that merges the same states writes the same bits), in f32 and rounded once.
void merge_states_cuda(void* out, DType out_dtype, const float* states, int num_states, int64_t num_rows,
                       int num_heads, int head_dim);

// The same merge where each row has its own states: out row r merges the partial rows
// parts[indptr[r] .. indptr[r + 1]) of o [*, num_heads, head_dim] (o_dtype) and lse [*, num_heads]
// (f32), folded in that order (indptr and parts [num_rows + 1] and [*] i32, device).
void merge_partials_cuda(void* out, DType out_dtype, const void* o, DType o_dtype, const float* lse,
                         const int32_t* indptr, const int32_t* parts, int64_t num_rows, int num_heads, int head_dim);

}  // namespace attnkit::parallel
