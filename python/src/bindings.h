// The pieces of the _attnkit extension module, one function a part, called by module.cc in order.
#pragma once

#include <nanobind/nanobind.h>

namespace attnkit::python {

namespace nb = nanobind;

void bind_spec(nb::module_& m);      // spec.cc: AttentionSpec, ModelSpec, presets
void bind_cache(nb::module_& m);     // cache.cc: KvCache (own pools or the caller's)
void bind_batch(nb::module_& m);     // batch.cc: Batch from page tables
void bind_backend(nb::module_& m);   // backend.cc: Backend, list_backends, select_backend
void bind_merge(nb::module_& m);     // merge.cc: merge_states
void bind_overhead(nb::module_& m);  // overhead.cc: the C++ loop the call-overhead benchmark compares with

}  // namespace attnkit::python
