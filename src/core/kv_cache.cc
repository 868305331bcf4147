// KvCache: pools, request page tables, and the validated store of new K/V.
#include "attnkit/kv_cache.h"

#include <utility>

#include "core/store_kv.h"

namespace attnkit {

KvCacheConfig KvCacheConfig::for_spec(const AttentionSpec& spec, int num_layers) {
  KvCacheConfig c;
  c.num_layers = num_layers;
  c.num_kv_heads = spec.num_kv_heads;
  c.head_dim_k = spec.head_dim_qk;
  c.head_dim_v = spec.head_dim_vo;
  c.mla = spec.is_mla();
  return c;
}

void KvCacheConfig::validate() const {
  ATTNKIT_CHECK(num_layers >= 1, "cache: num_layers must be >= 1, got ", num_layers);
  ATTNKIT_CHECK(num_pages >= 0, "cache: num_pages must be >= 0, got ", num_pages);
  ATTNKIT_CHECK(page_size >= 1 && page_size <= 256, "cache: page_size must be in 1..256, got ", page_size);
  ATTNKIT_CHECK(num_kv_heads >= 1, "cache: num_kv_heads must be >= 1, got ", num_kv_heads);
  ATTNKIT_CHECK(head_dim_k >= 1, "cache: head_dim_k must be >= 1, got ", head_dim_k);
  ATTNKIT_CHECK(head_dim_v >= 1, "cache: head_dim_v must be >= 1, got ", head_dim_v);
  ATTNKIT_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::e4m3,
                "cache: dtype must be f32, f16, bf16 or e4m3, got ", dtype_name(dtype));
  ATTNKIT_CHECK(k_scale > 0.0f && v_scale > 0.0f, "cache: k_scale and v_scale must be positive, got ", k_scale,
                " and ", v_scale);
  if (mla) {
    ATTNKIT_CHECK(num_kv_heads == 1, "cache: an MLA cache holds one latent vector per token, so num_kv_heads must be 1, got ",
                  num_kv_heads);
    ATTNKIT_CHECK(v_scale == 1.0f || v_scale == k_scale, "cache: an MLA latent is one tensor with one scale, k_scale (",
                  k_scale, "), which its V half is read with too; v_scale must be left at 1, got ", v_scale);
    ATTNKIT_CHECK(head_dim_v <= head_dim_k, "cache: MLA head_dim_v (", head_dim_v,
                  ") reads the front of the latent slot, so it must be <= head_dim_k (", head_dim_k, ")");
  }
  if (latent_format == LatentFormat::fp8_blocked) {
    ATTNKIT_CHECK(mla, "cache: latent_format fp8_blocked lays out an MLA latent; this cache is not MLA");
    ATTNKIT_CHECK(dtype == DType::e4m3, "cache: latent_format fp8_blocked stores e4m3, so dtype must be e4m3, got ",
                  dtype_name(dtype));
    ATTNKIT_CHECK(k_scale == 1.0f, "cache: latent_format fp8_blocked has a scale per ", kLatentScaleBlock,
                  " values in each slot; k_scale must be left at 1, got ", k_scale);
    ATTNKIT_CHECK(head_dim_v % kLatentScaleBlock == 0, "cache: latent_format fp8_blocked scales blocks of ",
                  kLatentScaleBlock, " values, so head_dim_v must be a multiple of it, got ", head_dim_v);
  }
}

KvCache::KvCache(const KvCacheConfig& config) : config_(config), allocator_(config.num_pages) {
  config_.validate();
  for (int l = 0; l < config_.num_layers; ++l) {
    owned_pools_.emplace_back(config_.device, static_cast<size_t>(config_.num_slots()) * config_.k_slot_bytes());
    k_pools_.push_back(owned_pools_.back().data());
    if (!config_.mla) {
      owned_pools_.emplace_back(config_.device, static_cast<size_t>(config_.num_slots()) * config_.v_slot_bytes());
      v_pools_.push_back(owned_pools_.back().data());
    }
  }
}

KvCache::KvCache(const KvCacheConfig& config, std::vector<void*> k_pools, std::vector<void*> v_pools)
    : config_(config), allocator_(config.num_pages), k_pools_(std::move(k_pools)), v_pools_(std::move(v_pools)) {
  config_.validate();
  const size_t layers = static_cast<size_t>(config_.num_layers);
  ATTNKIT_CHECK(k_pools_.size() == layers, "cache: k_pools must hold one pool a layer (", layers, "), got ",
                k_pools_.size());
  const size_t v_layers = config_.mla ? 0 : layers;
  ATTNKIT_CHECK(v_pools_.size() == v_layers, "cache: v_pools must hold ",
                (config_.mla ? "no pool for an MLA cache" : "one pool a layer"), " (", v_layers, "), got ",
                v_pools_.size());
  for (size_t l = 0; l < layers; ++l) {
    ATTNKIT_CHECK(k_pools_[l] != nullptr, "cache: k_pools[", l, "] must not be null");
    ATTNKIT_CHECK(config_.mla || v_pools_[l] != nullptr, "cache: v_pools[", l, "] must not be null");
  }
}

void* KvCache::k_pool(int layer) const {
  ATTNKIT_CHECK(layer >= 0 && layer < config_.num_layers, "cache: layer must be in 0..", config_.num_layers - 1,
                ", got ", layer);
  return k_pools_[static_cast<size_t>(layer)];
}

void* KvCache::v_pool(int layer) const {
  if (config_.mla) return k_pool(layer);
  ATTNKIT_CHECK(layer >= 0 && layer < config_.num_layers, "cache: layer must be in 0..", config_.num_layers - 1,
                ", got ", layer);
  return v_pools_[static_cast<size_t>(layer)];
}

TensorView KvCache::k_pool_view(int layer) const {
  if (config_.latent_format == LatentFormat::fp8_blocked) {  // mixed types in a slot: its bytes
    return TensorView(k_pool(layer), DType::u8, config_.device,
                      {config_.num_slots(), 1, static_cast<int64_t>(config_.k_slot_bytes())});
  }
  return TensorView(k_pool(layer), config_.dtype, config_.device,
                    {config_.num_slots(), config_.num_kv_heads, config_.head_dim_k});
}

TensorView KvCache::v_pool_view(int layer) const {
  if (config_.latent_format == LatentFormat::fp8_blocked) return k_pool_view(layer);
  // MLA: V is the front head_dim_v entries of each latent slot, whose row stride is head_dim_k.
  return TensorView(v_pool(layer), config_.dtype, config_.device,
                    {config_.num_slots(), config_.num_kv_heads, config_.mla ? config_.head_dim_k : config_.head_dim_v});
}

RequestId KvCache::add_request() {
  const RequestId id = next_id_++;
  requests_.emplace(id, Request{});
  return id;
}

const KvCache::Request& KvCache::request(RequestId id) const {
  auto it = requests_.find(id);
  ATTNKIT_CHECK(it != requests_.end(), "cache: request ", id, " is not in the cache");
  return it->second;
}

void KvCache::reserve(RequestId id, int64_t new_length) {
  const Request& r = request(id);
  ATTNKIT_CHECK(new_length >= r.length, "cache: request ", id, " cannot shrink from ", r.length, " to ",
                new_length, " tokens");
  const int64_t needed = (new_length + config_.page_size - 1) / config_.page_size;
  const int64_t extra = needed - static_cast<int64_t>(r.pages.size());
  std::vector<int32_t> pages = allocator_.allocate(static_cast<int>(extra));  // throws with nothing changed
  Request& w = requests_[id];
  w.pages.insert(w.pages.end(), pages.begin(), pages.end());
  w.length = new_length;
}

void KvCache::free_request(RequestId id) {
  const Request& r = request(id);
  allocator_.free(r.pages);
  requests_.erase(id);
}

int64_t KvCache::length(RequestId id) const { return request(id).length; }
const std::vector<int32_t>& KvCache::pages(RequestId id) const { return request(id).pages; }

int64_t KvCache::slot(RequestId id, int64_t position) const {
  const Request& r = request(id);
  ATTNKIT_CHECK(position >= 0 && position < r.length, "cache: position must be in 0..", r.length - 1,
                " for request ", id, ", got ", position);
  return int64_t{r.pages[static_cast<size_t>(position / config_.page_size)]} * config_.page_size +
         position % config_.page_size;
}

namespace {
void check_rows(const char* field, const TensorView& t, int64_t num_tokens, int heads, int dim,
                Device device) {
  ATTNKIT_CHECK(!t.empty(), "cache store: ", field, " must not be empty");
  ATTNKIT_CHECK(t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16, "cache store: ",
                field, " dtype must be f32, f16 or bf16, got ", dtype_name(t.dtype));
  ATTNKIT_CHECK(t.device == device, "cache store: ", field, " must be on ", device_name(device), ", got ",
                device_name(t.device));
  ATTNKIT_CHECK(t.rank == 3 && t.dim(0) == num_tokens && t.dim(1) == heads && t.dim(2) == dim,
                "cache store: ", field, " must be [", num_tokens, ", ", heads, ", ", dim, "], got ", t.describe());
}
}  // namespace

void KvCache::store(int layer, const TensorView& k, const TensorView& v, const TensorView& out_cache_loc) {
  ATTNKIT_CHECK(layer >= 0 && layer < config_.num_layers, "cache store: layer must be in 0..",
                config_.num_layers - 1, ", got ", layer);
  ATTNKIT_CHECK(out_cache_loc.dtype == DType::i64 && out_cache_loc.rank == 1 &&
                    out_cache_loc.device == config_.device,
                "cache store: out_cache_loc must be i64 [num_tokens] on ", device_name(config_.device), ", got ",
                out_cache_loc.describe());
  const int64_t n = out_cache_loc.dim(0);
  check_rows("k", k, n, config_.num_kv_heads, config_.head_dim_k, config_.device);
  if (config_.mla) {
    ATTNKIT_CHECK(v.empty(), "cache store: an MLA cache stores the latent as k; v must be empty, got ", v.describe());
  } else {
    check_rows("v", v, n, config_.num_kv_heads, config_.head_dim_v, config_.device);
  }
  if (n == 0) return;
  if (config_.device == Device::cpu) {
    const int64_t* loc = out_cache_loc.as<const int64_t>();
    for (int64_t t = 0; t < n; ++t) {
      ATTNKIT_CHECK(loc[t] >= 0 && loc[t] < config_.num_slots(), "cache store: out_cache_loc[", t,
                    "] must be in 0..", config_.num_slots() - 1, ", got ", loc[t]);
    }
    store_kv_cpu(config_, k_pool(layer), v_pool(layer), k, v, loc, n);
  } else {
#ifdef ATTNKIT_WITH_CUDA
    // Device slots were range-checked on the host when the batch was validated.
    store_kv_cuda(config_, k_pool(layer), v_pool(layer), k, v, out_cache_loc.as<const int64_t>(), n);
#endif
  }
}

}  // namespace attnkit
