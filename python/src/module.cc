// The _attnkit extension: attnkit::Error as attnkit.Error (a ValueError, the C++ message unchanged),
// the dtype and device names, and each part of the API (bindings.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "attnkit/attnkit.h"
#include "bindings.h"

namespace nb = nanobind;

NB_MODULE(_attnkit, m) {
  m.doc() = "attnkit: attention backends for LLM inference engines (C++ core, zero-copy DLPack tensors)";
  // Registered base first: nanobind tries the translators of later registrations first, so an
  // OutOfPagesError reaches Python as attnkit.OutOfPagesError and every other error as attnkit.Error.
  static nb::exception<attnkit::Error> error(m, "Error", PyExc_ValueError);
  static nb::exception<attnkit::OutOfPagesError> out_of_pages(m, "OutOfPagesError", error.ptr());
  error.attr("__doc__") = "Bad input or an unsupported request; the message names the field, the value and what was expected.";
  out_of_pages.attr("__doc__") =
      "The KV cache has fewer free pages than a batch needs; nothing was allocated (the request can wait).";

  attnkit::python::bind_spec(m);
  attnkit::python::bind_cache(m);
  attnkit::python::bind_batch(m);
  attnkit::python::bind_backend(m);
  attnkit::python::bind_merge(m);
  attnkit::python::bind_overhead(m);

  m.def(
      "cuda_available",
      [] {
        std::string why;
        const bool ok = attnkit::cuda_available(&why);
        return nb::make_tuple(ok, why);
      },
      "(available, why_not): whether this build and machine can run the CUDA backends, and if not, why.");
  m.def("cuda_device_name", &attnkit::cuda_device_name, "The CUDA device attnkit runs on (\"NVIDIA H200\"); empty without one.");
  m.def("set_cpu_threads", &attnkit::set_cpu_threads, nb::arg("num_threads"),
        "Sets the `cpu` backend's thread count (the calling thread included) before its first forward; 0: one a core.");
#ifdef ATTNKIT_WITH_CUDA
  m.attr("built_with_cuda") = true;
#else
  m.attr("built_with_cuda") = false;
#endif
}
