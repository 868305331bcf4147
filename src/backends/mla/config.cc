#include "backends/mla/config.h"

#include "attnkit/error.h"
#include "core/support_text.h"

namespace attnkit::mla {

using support::contains;
using support::list_text;

int tile_rows_for(int max_request_rows, bool fp8_latent) {
  if (max_request_rows <= 16) return 16;
  return fp8_latent ? 32 : kTileRows;
}

std::string why_unsupported(const KvCacheConfig& cache, DType q_dtype) {
  if (!contains(Support::page_sizes, cache.page_size)) {
    return detail::concat("page_size must be ", list_text(Support::page_sizes), ", got ", cache.page_size);
  }
  if (!contains(Support::q_dtypes, q_dtype)) {
    return detail::concat("q dtype must be ", list_text(Support::q_dtypes), ", got ", dtype_name(q_dtype));
  }
  if (!contains(Support::kv_dtypes, cache.dtype)) {
    return detail::concat("cache dtype must be ", list_text(Support::kv_dtypes), ", got ", dtype_name(cache.dtype));
  }
  return {};
}

void check_supported(const KvCacheConfig& cache, DType q_dtype, const char* who) {
  const std::string why = why_unsupported(cache, q_dtype);
  ATTNKIT_CHECK(why.empty(), "mla ", who, ": ", why);
}

Capabilities capabilities() {
  Capabilities c;
  c.device = Device::cuda;
  c.q_dtypes.assign(Support::q_dtypes.begin(), Support::q_dtypes.end());
  c.kv_dtypes.assign(Support::kv_dtypes.begin(), Support::kv_dtypes.end());
  c.mla = true;
  c.mla_dims = {Support::kv_lora_rank};
  c.mla_rope_dims = {Support::rope_dim};
  c.fp8_blocked_latent = true;
  c.plain_e4m3_latent = false;
  c.page_sizes.assign(Support::page_sizes.begin(), Support::page_sizes.end());
  c.min_page_size = Support::page_sizes.front();
  c.max_page_size = Support::page_sizes.back();
  c.mha = false;
  c.sinks = false;
  c.custom_mask = false;
  c.cuda_graph = true;  // decode, within init_cuda_graph_state's bounds
  c.lse = true;         // every kernel and the combine write it where asked
  return c;
}

}  // namespace attnkit::mla
