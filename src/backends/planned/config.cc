#include "backends/planned/config.h"

#include "attnkit/error.h"
#include "core/support_text.h"

namespace attnkit::planned {

using support::contains;
using support::list_text;

std::string why_unsupported(const KernelKey& key, int page_size) {
  if (!contains(Support::head_dims, key.head_dim)) {
    return detail::concat("head_dim must be ", list_text(Support::head_dims), ", got ", key.head_dim);
  }
  if (!contains(Support::q_dtypes, key.q_dtype)) {
    return detail::concat("q dtype must be ", list_text(Support::q_dtypes), ", got ", dtype_name(key.q_dtype));
  }
  if (!contains(Support::kv_dtypes, key.kv_dtype)) {
    return detail::concat("cache dtype must be ", list_text(Support::kv_dtypes), ", got ", dtype_name(key.kv_dtype));
  }
  if (page_size < Support::min_page_size || page_size > Support::max_page_size) {
    return detail::concat("page_size must be in ", Support::min_page_size, "..", Support::max_page_size, ", got ",
                          page_size);
  }
  return {};
}

KernelKey select(const KernelKey& key, int page_size, const char* who) {
  const std::string why = why_unsupported(key, page_size);
  ATTNKIT_CHECK(why.empty(), "planned ", who, ": ", why);
  return key;
}

Capabilities capabilities() {
  Capabilities c;
  c.device = Device::cuda;
  c.q_dtypes.assign(Support::q_dtypes.begin(), Support::q_dtypes.end());
  c.kv_dtypes.assign(Support::kv_dtypes.begin(), Support::kv_dtypes.end());
  c.head_dims.assign(Support::head_dims.begin(), Support::head_dims.end());
  c.min_page_size = Support::min_page_size;
  c.max_page_size = Support::max_page_size;
  c.cuda_graph = true;
  c.lse = true;  // both kernels write it where asked (context parallelism merges partial states)
  return c;  // MLA off; every other feature on
}

}  // namespace attnkit::planned
