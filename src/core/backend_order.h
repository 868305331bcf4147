// The written rules of `auto`: the order in which it tries the backends of a device, best first,
// for a cache. The first that is available and supports the batch wins.
#pragma once

#include <span>

#include "attnkit/kv_cache.h"

namespace attnkit {

// Static arrays: `auto` asks at every plan, so nothing is built per call.
std::span<const char* const> backend_order(const KvCacheConfig& cache);

}  // namespace attnkit
