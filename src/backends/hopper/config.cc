#include "backends/hopper/config.h"

#include "attnkit/error.h"
#include "backends/planned/config.h"
#include "core/support_text.h"

namespace attnkit::hopper {

using support::contains;
using support::list_text;

std::string why_unsupported(const KernelKey& key, int page_size, int group) {
  if (!contains(Support::head_dims, key.head_dim)) {
    return detail::concat("head_dim must be ", list_text(Support::head_dims), ", got ", key.head_dim);
  }
  if (!contains(Support::q_dtypes, key.q_dtype)) {
    return detail::concat("q dtype must be ", list_text(Support::q_dtypes), ", got ", dtype_name(key.q_dtype));
  }
  if (key.kv_dtype != key.q_dtype && key.kv_dtype != DType::e4m3) {
    return detail::concat("cache dtype must be q's (", dtype_name(key.q_dtype), ") or e4m3, got ",
                          dtype_name(key.kv_dtype));
  }
  if (!contains(Support::page_sizes, page_size)) {
    return detail::concat("page_size must be ", list_text(Support::page_sizes), ", got ", page_size);
  }
  if (group < 1 || group > Support::max_group) {
    return detail::concat("num_qo_heads / num_kv_heads must be in 1..", Support::max_group, ", got ", group);
  }
  return {};
}

std::string why_no_fp8_products(DType kv_dtype, int head_dim, int page_size) {
  if (kv_dtype != DType::e4m3) return detail::concat("fp8 products need an e4m3 cache, got ", dtype_name(kv_dtype));
  if (head_dim != Support::fp8_products_head_dim) {
    return detail::concat("fp8 products need head_dim ", Support::fp8_products_head_dim, ", got ", head_dim);
  }
  if (page_size < Support::min_tma_page_size) {
    return detail::concat("fp8 products need pages of ", Support::min_tma_page_size, " slots or more, got ",
                          page_size);
  }
  return {};
}

Capabilities capabilities() {
  Capabilities c = planned::capabilities();  // decode is planned's kernel; extend narrows it
  c.q_dtypes.assign(Support::q_dtypes.begin(), Support::q_dtypes.end());
  c.kv_dtypes.assign(Support::kv_dtypes.begin(), Support::kv_dtypes.end());
  c.head_dims.assign(Support::head_dims.begin(), Support::head_dims.end());
  c.page_sizes.assign(Support::page_sizes.begin(), Support::page_sizes.end());
  c.min_page_size = Support::page_sizes.front();
  c.max_page_size = Support::page_sizes.back();
  c.kv_dtype_is_q_dtype = true;
  c.custom_mask = false;
  return c;
}

}  // namespace attnkit::hopper
