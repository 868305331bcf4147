// The C++ side of the call-overhead benchmark (bench/python_overhead.py): the same step as a Python
// caller's Batch + plan + forward, done in a C++ loop: the batch's arrays copied into a fresh
// ForwardBatch (what an engine's C++ glue does from its own), plan, one layer's forward.
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend.h"
#include "bindings.h"
#include "tensors.h"

namespace attnkit::python {

void bind_overhead(nb::module_& m) {
  m.def(
      "_time_cpp_step",
      [](PyBackend& b, PyBatch& batch, int layer, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
         int iterations) {
        const char* who = "_time_cpp_step";
        const TensorView tq = view_of({who, "q"}, q), tk = view_of({who, "k"}, k), tv = view_of({who, "v"}, v),
                         to = view_of({who, "out"}, out);
        AttentionBackend& backend = b.get();
        // Two batches in turn: the one planned last must stay alive while the next is filled.
        ForwardBatch steps[2];
        std::vector<double> ns;
        ns.reserve(static_cast<size_t>(iterations));
        {
          nb::gil_scoped_release released;
          for (int i = 0; i < iterations; ++i) {
            const auto start = std::chrono::steady_clock::now();
            ForwardBatch& step = steps[i % 2];
            step = batch.batch;
            backend.init_forward_metadata(step);
            backend.forward(layer, tq, tk, tv, to);
            ns.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
          }
          backend.synchronize();
        }
        // The backend must not keep pointing at this loop's batches, which die here.
        b.plan(nb::find(&batch), nb::none());
        return ns;
      },
      nb::arg("backend"), nb::arg("batch"), nb::arg("layer"), nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out"),
      nb::arg("iterations"),
      "Host nanoseconds of each of `iterations` C++ steps (batch copy + plan + forward of `layer`).");
}

}  // namespace attnkit::python
