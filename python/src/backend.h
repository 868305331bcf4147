// The Python Backend: an AttentionBackend over a Python KvCache, with the current Batch kept alive
// between plan and forward, and its CUDA work ordered with the caller's stream.
#pragma once

#include <nanobind/nanobind.h>

#include <functional>
#include <memory>
#include <string>

#include "attnkit/backend.h"
#include "batch.h"
#include "cache.h"
#include "stream.h"

namespace attnkit::python {

namespace nb = nanobind;

enum class Entry { forward, extend, decode };

class PyBackend {
 public:
  // `backend` is made over `model` and `cache`, which this object keeps alive.
  PyBackend(ModelSpec model, nb::object cache_owner, PyKvCache& cache,
            const std::function<std::unique_ptr<AttentionBackend>(const BackendContext&)>& make);

  AttentionBackend& get() { return *backend_; }
  bool on_cuda() const { return backend_->caps().device == Device::cuda; }
  int device_id() const { return cache_->device_id; }

  void plan(nb::object batch, nb::handle stream);
  // `lse`: None, or the f32 [num_tokens, num_qo_heads] tensor to write each row's LSE into.
  void forward(Entry entry, int layer, nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
               nb::handle stream);
  nb::object batch() const { return batch_owner_; }

 private:
  ModelSpec model_;            // BackendContext points here and at cache_: neither moves
  nb::object cache_owner_;     // the Python KvCache
  PyKvCache* cache_;
  std::unique_ptr<AttentionBackend> backend_;
  nb::object batch_owner_;     // the Python Batch the last plan read: alive until the next plan
  std::string who_;            // "<name> forward", for the tensor checks' messages
  StreamJoin join_;
};

// The ModelSpec of `spec`: a ModelSpec as it is, an AttentionSpec for every one of the cache's layers.
ModelSpec model_of(nb::handle spec, int num_layers);
nb::dict capabilities_dict(const Capabilities& caps);

}  // namespace attnkit::python
