// DLPack arrays as TensorViews and host index vectors, with attnkit's checks and messages.
#include "tensors.h"

#include <Python.h>
#include <nanobind/stl/string.h>

#include <sstream>

#include "attnkit/error.h"

namespace attnkit::python {

namespace {

std::string shape_text(const Array& a) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.shape(i);
  os << "]";
  return os.str();
}

std::string dlpack_dtype_name(nb::dlpack::dtype dt) {
  using Code = nb::dlpack::dtype_code;
  const char* kind = "?";
  switch (static_cast<Code>(dt.code)) {
    case Code::Int: kind = "int"; break;
    case Code::UInt: kind = "uint"; break;
    case Code::Float: kind = "float"; break;
    case Code::Bfloat: kind = "bfloat"; break;
    case Code::Complex: kind = "complex"; break;
    case Code::Bool: return "bool";
    case Code::Float8_E4M3FN: return "float8_e4m3fn";
    case Code::Float8_E5M2: return "float8_e5m2";
    default: return "dlpack code " + std::to_string(dt.code);
  }
  return std::string(kind) + std::to_string(dt.bits);
}

// A torch.Tensor's DLPack capsule through torch._C._to_dlpack (what torch.utils.dlpack.to_dlpack
// is): 0.4 us where Tensor.__dlpack__(max_version=...), which nanobind calls, took 3.5 us, nine
// times a step. Its stream argument is not needed: StreamJoin orders attnkit with the caller's
// stream itself. Invalid for anything else, or before torch is imported.
nb::object torch_dlpack(nb::handle h) {
  static PyTypeObject* tensor_type = nullptr;
  static nb::handle to_dlpack;
  if (tensor_type == nullptr) {
    PyObject* torch = PyImport_GetModule(nb::str("torch").ptr());  // only if already imported
    if (torch == nullptr) {
      PyErr_Clear();
      return nb::object();
    }
    nb::object module = nb::steal(torch);
    to_dlpack = nb::object(module.attr("_C").attr("_to_dlpack")).release();
    tensor_type = reinterpret_cast<PyTypeObject*>(nb::object(module.attr("Tensor")).release().ptr());
  }
  if (!PyObject_TypeCheck(h.ptr(), tensor_type)) return nb::object();
  return to_dlpack(h);
}

}  // namespace

Array as_array(const Arg& arg, nb::handle h) {
  if (PyCapsule_CheckExact(h.ptr()) && PyCapsule_IsValid(h.ptr(), "used_dltensor")) {
    throw Error(detail::concat(arg.who, ": ", arg.field,
                               " is a DLPack capsule that was already consumed (a capsule can be read once)"));
  }
  Array a;
  nb::object torch_capsule = torch_dlpack(h);
  if (!nb::try_cast(torch_capsule.is_valid() ? nb::handle(torch_capsule) : h, a, /*convert=*/false)) {
    throw Error(detail::concat(arg.who, ": ", arg.field,
                               " must be a tensor (torch, NumPy, CuPy: anything with __dlpack__), got ",
                               nb::type_name(h.type()).c_str()));
  }
  return a;
}

std::string describe(const Array& a) {
  std::ostringstream os;
  os << shape_text(a) << " " << dlpack_dtype_name(a.dtype()) << " ";
  if (a.device_type() == nb::device::cpu::value) {
    os << "cpu";
  } else if (a.device_type() == nb::device::cuda::value) {
    os << "cuda:" << a.device_id();
  } else {
    os << "dlpack device " << a.device_type();
  }
  os << ", strides [";
  for (size_t i = 0; i < a.ndim(); ++i) os << (i ? ", " : "") << a.stride(i);
  os << "]";
  return os.str();
}

DType dtype_of(const Arg& arg, const Array& a) {
  using Code = nb::dlpack::dtype_code;
  const nb::dlpack::dtype dt = a.dtype();
  if (dt.lanes == 1) {
    switch (static_cast<Code>(dt.code)) {
      case Code::Float:
        if (dt.bits == 32) return DType::f32;
        if (dt.bits == 16) return DType::f16;
        break;
      case Code::Bfloat:
        if (dt.bits == 16) return DType::bf16;
        break;
      case Code::Float8_E4M3FN:
        return DType::e4m3;
      case Code::Int:
        if (dt.bits == 32) return DType::i32;
        if (dt.bits == 64) return DType::i64;
        break;
      case Code::UInt:
      case Code::Bool:
        if (dt.bits == 8) return DType::u8;
        break;
      default:
        break;
    }
  }
  throw Error(detail::concat(arg.who, ": ", arg.field,
                             " dtype must be float32, float16, bfloat16, float8_e4m3fn, int32, int64 or uint8, got ",
                             dlpack_dtype_name(dt)));
}

Device device_of(const Arg& arg, const Array& a) {
  if (a.device_type() == nb::device::cpu::value) return Device::cpu;
  if (a.device_type() == nb::device::cuda::value) return Device::cuda;
  throw Error(detail::concat(arg.who, ": ", arg.field, " must be on the CPU or a CUDA device, got ", describe(a)));
}

bool is_contiguous(const Array& a) {
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    // A dimension of one element has no stride to speak of (torch gives it any).
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

TensorView view_of(const Arg& arg, const Array& a, int cuda_device) {
  const DType dtype = dtype_of(arg, a);
  const Device device = device_of(arg, a);
  ATTNKIT_CHECK(device != Device::cuda || cuda_device < 0 || a.device_id() == cuda_device, arg.who, ": ", arg.field,
                " is on cuda:", a.device_id(), ", the cache on cuda:", cuda_device);
  ATTNKIT_CHECK(a.ndim() >= 1 && a.ndim() <= 4, arg.who, ": ", arg.field, " must have 1 to 4 dimensions, got ",
                describe(a));
  ATTNKIT_CHECK(is_contiguous(a), arg.who, ": ", arg.field,
                " must be contiguous (row-major, dense): the kernels read whole rows, got ", describe(a),
                "; a slice of a packed qkv tensor needs .contiguous() first");
  TensorView v;
  v.data = a.data();
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < v.rank; ++i) v.shape[static_cast<size_t>(i)] = static_cast<int64_t>(a.shape(static_cast<size_t>(i)));
  return v;
}

TensorView view_of(const Arg& arg, nb::handle h, int cuda_device) {
  return view_of(arg, as_array(arg, h), cuda_device);
}

namespace {

// A 1-D integer array's values on the host, each checked to fit in T.
template <typename T>
std::vector<T> read_ints(const Arg& arg, nb::handle h, std::initializer_list<DType> accepted, const char* expected) {
  const Array a = as_array(arg, h);
  const DType dtype = dtype_of(arg, a);
  bool ok = false;
  for (DType d : accepted) ok = ok || d == dtype;
  ATTNKIT_CHECK(ok && a.ndim() == 1, arg.who, ": ", arg.field, " must be a 1-D ", expected, " array, got ", describe(a));
  const size_t n = a.shape(0);
  const void* base = a.data();
  int64_t stride = n > 0 ? a.stride(0) : 1;
  std::vector<uint8_t> staged;  // a CUDA array's bytes, brought to the host
  if (device_of(arg, a) == Device::cuda) {
    ATTNKIT_CHECK(is_contiguous(a), arg.who, ": ", arg.field, " on a CUDA device must be contiguous, got ", describe(a));
    staged.resize(n * dtype_size(dtype));
    if (n > 0) {
      copy(TensorView(staged.data(), dtype, Device::cpu, {static_cast<int64_t>(n)}),
           TensorView(a.data(), dtype, Device::cuda, {static_cast<int64_t>(n)}));
    }
    base = staged.data();
    stride = 1;
  }
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t at = static_cast<int64_t>(i) * stride;
    int64_t x = 0;
    switch (dtype) {
      case DType::i32: x = static_cast<const int32_t*>(base)[at]; break;
      case DType::i64: x = static_cast<const int64_t*>(base)[at]; break;
      default: x = static_cast<const uint8_t*>(base)[at]; break;
    }
    ATTNKIT_CHECK(static_cast<int64_t>(static_cast<T>(x)) == x, arg.who, ": ", arg.field, "[", i, "] = ", x,
                  " does not fit in ", expected);
    out[i] = static_cast<T>(x);
  }
  return out;
}

}  // namespace

std::vector<int32_t> host_i32(const Arg& arg, nb::handle h) {
  return read_ints<int32_t>(arg, h, {DType::i32, DType::i64}, "int32");
}

std::vector<int64_t> host_i64(const Arg& arg, nb::handle h) {
  return read_ints<int64_t>(arg, h, {DType::i32, DType::i64}, "int64");
}

std::vector<uint8_t> host_u8(const Arg& arg, nb::handle h) {
  return read_ints<uint8_t>(arg, h, {DType::u8}, "uint8 (or bool)");
}

}  // namespace attnkit::python

namespace attnkit::python {

namespace {
// The text of a dtype or device object: a str as it is, else str(obj) less a framework prefix.
std::string name_of(nb::handle h) {
  std::string text = nb::isinstance<nb::str>(h) ? nb::cast<std::string>(h) : nb::cast<std::string>(nb::str(h));
  for (const char* prefix : {"torch.", "numpy.", "<class 'numpy.", "dtype('"}) {
    const std::string p = prefix;
    if (text.rfind(p, 0) == 0) text = text.substr(p.size());
  }
  while (!text.empty() && (text.back() == '\'' || text.back() == ')' || text.back() == '>')) text.pop_back();
  return text;
}
}  // namespace

DType parse_dtype_arg(const Arg& arg, nb::handle h) {
  const std::string text = name_of(h);
  if (text == "bfloat16") return DType::bf16;
  if (text == "float16" || text == "half") return DType::f16;
  if (text == "float32" || text == "float") return DType::f32;
  if (text == "float8_e4m3fn") return DType::e4m3;
  return parse_dtype(text, detail::concat(arg.who, ": ", arg.field));
}

Device parse_device_arg(const Arg& arg, nb::handle h) {
  const std::string text = name_of(h);
  if (text == "cpu") return Device::cpu;
  if (text.rfind("cuda", 0) == 0) return Device::cuda;
  throw Error(detail::concat(arg.who, ": ", arg.field, " must be 'cpu' or 'cuda', got '", text, "'"));
}

}  // namespace attnkit::python
