// Python tensors (anything with __dlpack__: torch, NumPy, CuPy) seen as attnkit TensorViews, zero
// copy, after the checks that turn a mismatch into attnkit::Error naming the argument: dtype,
// device, shape, strides. Index arrays (page tables, indptr) are read into host vectors here too.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnkit/tensor.h"

namespace attnkit::python {

namespace nb = nanobind;
using Array = nb::ndarray<>;

// `who` starts every message ("cpu forward", "KvCache.from_pools"); `field` names the argument.
struct Arg {
  const char* who;
  const char* field;
};

// `h` as a DLPack array; attnkit::Error when it is none, or a capsule that was already consumed.
Array as_array(const Arg& arg, nb::handle h);
// "[4, 32, 128] bf16 cuda:0, strides [4096, 128, 1]", for messages.
std::string describe(const Array& a);
DType dtype_of(const Arg& arg, const Array& a);
Device device_of(const Arg& arg, const Array& a);
// Row-major and dense: the kernels read [rows, heads, head_dim] with no stride of their own.
bool is_contiguous(const Array& a);
// A zero-copy view of a dense array of rank 1..4. `cuda_device` >= 0: a CUDA array must be on that
// device (the cache's); the view itself names the device kind only.
TensorView view_of(const Arg& arg, const Array& a, int cuda_device = -1);
TensorView view_of(const Arg& arg, nb::handle h, int cuda_device = -1);

// A 1-D integer array (i32 or i64, any stride, CPU or CUDA) as host values; CUDA arrays are copied
// to the host, which waits for the device. i64 values must fit in i32.
std::vector<int32_t> host_i32(const Arg& arg, nb::handle h);
std::vector<int64_t> host_i64(const Arg& arg, nb::handle h);
std::vector<uint8_t> host_u8(const Arg& arg, nb::handle h);

}  // namespace attnkit::python

namespace attnkit::python {

// A dtype given as attnkit's name ("bf16"), the framework's ("bfloat16") or its object
// (torch.bfloat16, numpy.float32), for the cache's element type.
DType parse_dtype_arg(const Arg& arg, nb::handle h);
// "cpu", "cuda", "cuda:0" or a torch.device.
Device parse_device_arg(const Arg& arg, nb::handle h);

}  // namespace attnkit::python
