// The Python KvCache: attnkit::KvCache with its own pools or over the caller's tensors, which it
// keeps alive; shared by the cache and backend bindings.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <vector>

#include "attnkit/kv_cache.h"

namespace attnkit::python {

struct PyKvCache {
  std::unique_ptr<KvCache> cache;
  std::vector<nanobind::object> pool_owners;  // the caller's pool tensors (empty: the cache owns its pools)
  int device_id = 0;                          // CUDA pools: the device they are on
};

}  // namespace attnkit::python
