// The written rules of `auto`: the order in which it tries the backends of a device, best first,
// for a cache. The first that is available and supports the batch wins.
#pragma once

#include <string>
#include <vector>

#include "attnkit/kv_cache.h"

namespace attnkit {

std::vector<std::string> backend_order(const KvCacheConfig& cache);

}  // namespace attnkit
