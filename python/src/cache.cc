// KvCache from Python: pools of its own, or a view over the engine's tensors (one [num_layers, 2,
// num_pages, page_size, num_kv_heads, head_dim] tensor, one [2, ...] tensor a layer, or K and V
// lists), checked once here; nothing is copied. Also the cache's own page allocator and requests.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>

#include "bindings.h"
#include "cache.h"
#include "tensors.h"

namespace attnkit::python {

namespace {

constexpr const char* kFromPools = "KvCache.from_pools";

nb::dlpack::dtype dlpack_dtype(DType d) {
  using Code = nb::dlpack::dtype_code;
  switch (d) {
    case DType::f32: return {static_cast<uint8_t>(Code::Float), 32, 1};
    case DType::f16: return {static_cast<uint8_t>(Code::Float), 16, 1};
    case DType::bf16: return {static_cast<uint8_t>(Code::Bfloat), 16, 1};
    case DType::e4m3: return {static_cast<uint8_t>(Code::Float8_E4M3FN), 8, 1};
    default: throw Error("KvCache: a pool of dtype " + std::string(dtype_name(d)) + " cannot be exported");
  }
}

// The layout the pools were given in, as one shape a pool of one layer: [num_pages, page_size, heads, dim].
struct PoolShape {
  int num_pages = 0, page_size = 0, num_heads = 0, head_dim = 0;
  DType dtype = DType::bf16;
  Device device = Device::cpu;
  int device_id = 0;
};

// One layer's pool: [num_pages, page_size, heads, dim], or [num_slots, heads, dim] with page_size given.
PoolShape pool_shape(const Arg& arg, const Array& a, std::optional<int> page_size) {
  view_of(arg, a);  // dtype, device, contiguity
  PoolShape s;
  s.dtype = dtype_of(arg, a);
  s.device = device_of(arg, a);
  s.device_id = a.device_id();
  if (a.ndim() == 4) {
    s.num_pages = static_cast<int>(a.shape(0));
    s.page_size = static_cast<int>(a.shape(1));
    ATTNKIT_CHECK(!page_size || *page_size == s.page_size, arg.who, ": page_size (", *page_size,
                  ") must match the pool's dimension 1, got ", describe(a));
  } else {
    ATTNKIT_CHECK(a.ndim() == 3 && page_size, arg.who, ": ", arg.field,
                  " must be [num_pages, page_size, num_kv_heads, head_dim], or [num_slots, num_kv_heads, head_dim] "
                  "with page_size given, got ", describe(a));
    ATTNKIT_CHECK(*page_size >= 1 && a.shape(0) % static_cast<size_t>(*page_size) == 0, arg.who, ": ", arg.field,
                  "'s num_slots (", a.shape(0), ") must be a multiple of page_size (", *page_size, ")");
    s.page_size = *page_size;
    s.num_pages = static_cast<int>(a.shape(0) / static_cast<size_t>(*page_size));
  }
  s.num_heads = static_cast<int>(a.shape(a.ndim() - 2));
  s.head_dim = static_cast<int>(a.shape(a.ndim() - 1));
  return s;
}

void check_same(const char* field, size_t i, const PoolShape& first, const PoolShape& s) {
  ATTNKIT_CHECK(s.num_pages == first.num_pages && s.page_size == first.page_size && s.num_heads == first.num_heads &&
                    s.dtype == first.dtype && s.device == first.device && s.device_id == first.device_id,
                kFromPools, ": ", field, "[", i, "] must have the shape, dtype and device of k_pools[0]");
}

PyKvCache* make_view(KvCacheConfig config, const PoolShape& shape, std::vector<void*> k, std::vector<void*> v,
                     std::vector<nb::object> owners) {
  config.num_pages = shape.num_pages;
  config.page_size = shape.page_size;
  config.dtype = shape.dtype;
  config.device = shape.device;
  auto* c = new PyKvCache();
  c->cache = std::make_unique<KvCache>(config, std::move(k), std::move(v));
  c->pool_owners = std::move(owners);
  c->device_id = shape.device_id;
  return c;
}

PyKvCache* from_pools(nb::object kv_pool, nb::object k_pools, nb::object v_pools, std::optional<int> page_size,
                      float k_scale, float v_scale, bool mla) {
  KvCacheConfig config;
  config.k_scale = k_scale;
  config.v_scale = v_scale;
  config.mla = mla;
  std::vector<void*> k, v;
  std::vector<nb::object> owners;
  if (!kv_pool.is_none()) {
    ATTNKIT_CHECK(k_pools.is_none() && v_pools.is_none() && !mla, kFromPools,
                  ": give kv_pool (K and V together) or k_pools and v_pools, not both; MLA takes k_pools alone");
    // One tensor [num_layers, 2, ...], or a list of one [2, ...] tensor a layer.
    std::vector<Array> layers;
    std::vector<Array> whole;
    if (nb::isinstance<nb::list>(kv_pool) || nb::isinstance<nb::tuple>(kv_pool)) {
      size_t i = 0;
      for (nb::handle h : kv_pool) {
        const std::string field = "kv_pool[" + std::to_string(i++) + "]";
        Array a = as_array({kFromPools, field.c_str()}, h);
        ATTNKIT_CHECK(a.ndim() == 5 && a.shape(0) == 2, kFromPools, ": ", field,
                      " must be [2, num_pages, page_size, num_kv_heads, head_dim] (K then V), got ", describe(a));
        layers.push_back(a);
        owners.emplace_back(nb::borrow(h));
      }
    } else {
      Array a = as_array({kFromPools, "kv_pool"}, kv_pool);
      ATTNKIT_CHECK(a.ndim() == 6 && a.shape(1) == 2, kFromPools,
                    ": kv_pool must be [num_layers, 2, num_pages, page_size, num_kv_heads, head_dim], got ", describe(a));
      ATTNKIT_CHECK(is_contiguous(a), kFromPools, ": kv_pool must be contiguous, got ", describe(a));
      whole.push_back(a);
      owners.push_back(kv_pool);
    }
    const size_t num_layers = whole.empty() ? layers.size() : whole[0].shape(0);
    ATTNKIT_CHECK(num_layers >= 1, kFromPools, ": kv_pool must hold at least one layer");
    PoolShape first;
    for (size_t l = 0; l < num_layers; ++l) {
      const Array& src = whole.empty() ? layers[l] : whole[0];
      ATTNKIT_CHECK(is_contiguous(src), kFromPools, ": kv_pool[", l, "] must be contiguous, got ", describe(src));
      const size_t d = whole.empty() ? 1 : 2;  // the dimension where [num_pages, ...] starts
      const size_t shape[4] = {src.shape(d), src.shape(d + 1), src.shape(d + 2), src.shape(d + 3)};
      const size_t pool_elems = shape[0] * shape[1] * shape[2] * shape[3];
      const size_t elem = dtype_size(dtype_of({kFromPools, "kv_pool"}, src));
      auto* base = static_cast<std::byte*>(src.data()) + (whole.empty() ? 0 : l * 2 * pool_elems * elem);
      const Array k_view(base, 4, shape, nb::handle(), nullptr, src.dtype(), src.device_type(), src.device_id());
      const PoolShape s = pool_shape({kFromPools, "kv_pool"}, k_view, page_size);
      if (l == 0) first = s;
      check_same("kv_pool", l, first, s);
      k.push_back(base);
      v.push_back(base + pool_elems * elem);
    }
    config.num_layers = static_cast<int>(num_layers);
    config.num_kv_heads = first.num_heads;
    config.head_dim_k = config.head_dim_v = first.head_dim;
    return make_view(config, first, std::move(k), std::move(v), std::move(owners));
  }
  ATTNKIT_CHECK(!k_pools.is_none(), kFromPools, ": give kv_pool, or k_pools (and v_pools unless mla)");
  ATTNKIT_CHECK(mla == v_pools.is_none(), kFromPools,
                mla ? ": an MLA cache holds one latent pool a layer: v_pools must be None"
                    : ": v_pools must be given with k_pools (one V pool a layer)");
  PoolShape first, first_v;
  size_t i = 0;
  for (nb::handle h : k_pools) {
    const std::string field = "k_pools[" + std::to_string(i) + "]";
    const Array a = as_array({kFromPools, field.c_str()}, h);
    const PoolShape s = pool_shape({kFromPools, field.c_str()}, a, page_size);
    if (i == 0) first = s;
    check_same("k_pools", i, first, s);
    k.push_back(a.data());
    owners.emplace_back(nb::borrow(h));
    ++i;
  }
  ATTNKIT_CHECK(!k.empty(), kFromPools, ": k_pools must hold at least one layer");
  i = 0;
  if (!mla) {
    for (nb::handle h : v_pools) {
      const std::string field = "v_pools[" + std::to_string(i) + "]";
      const Array a = as_array({kFromPools, field.c_str()}, h);
      PoolShape s = pool_shape({kFromPools, field.c_str()}, a, page_size);
      if (i == 0) first_v = s;
      ATTNKIT_CHECK(s.num_heads == first.num_heads, kFromPools, ": ", field, " must have k_pools' num_kv_heads (",
                    first.num_heads, "), got ", describe(a));
      s.head_dim = first.head_dim;  // V may have its own head_dim, the same for every layer
      check_same("v_pools", i, first, s);
      ATTNKIT_CHECK(static_cast<int>(a.shape(a.ndim() - 1)) == first_v.head_dim, kFromPools, ": ", field,
                    " must have v_pools[0]'s head_dim, got ", describe(a));
      v.push_back(a.data());
      owners.emplace_back(nb::borrow(h));
      ++i;
    }
  }
  config.num_layers = static_cast<int>(k.size());
  config.num_kv_heads = first.num_heads;
  config.head_dim_k = first.head_dim;
  config.head_dim_v = mla ? first.head_dim : first_v.head_dim;
  return make_view(config, first, std::move(k), std::move(v), std::move(owners));
}

nb::object pool_array(PyKvCache& c, int layer, bool is_v) {
  const KvCacheConfig& cfg = c.cache->config();
  void* data = is_v ? c.cache->v_pool(layer) : c.cache->k_pool(layer);
  const int device_type = cfg.device == Device::cuda ? nb::device::cuda::value : nb::device::cpu::value;
  if (cfg.latent_format == LatentFormat::fp8_blocked) {  // mixed types in a slot: its bytes
    const size_t bytes[3] = {static_cast<size_t>(cfg.num_pages), static_cast<size_t>(cfg.page_size), cfg.k_slot_bytes()};
    nb::ndarray<nb::array_api> a(data, 3, bytes, nb::find(&c), nullptr, nb::dtype<uint8_t>(), device_type, c.device_id);
    return nb::cast(a, nb::rv_policy::reference);
  }
  const size_t dim = static_cast<size_t>(is_v && !cfg.mla ? cfg.head_dim_v : cfg.head_dim_k);
  const size_t shape[4] = {static_cast<size_t>(cfg.num_pages), static_cast<size_t>(cfg.page_size),
                           static_cast<size_t>(cfg.num_kv_heads), dim};
  // array_api: an object with __dlpack__ and __dlpack_device__, for torch, NumPy and CuPy alike.
  nb::ndarray<nb::array_api> a(data, 4, shape, nb::find(&c), nullptr, dlpack_dtype(cfg.dtype), device_type,
                               c.device_id);
  return nb::cast(a, nb::rv_policy::reference);
}

}  // namespace

void bind_cache(nb::module_& m) {
  nb::class_<PyKvCache>(m, "KvCache",
                        "The paged KV cache: per layer a K and a V pool of num_pages x page_size token slots, each\n"
                        "slot [num_kv_heads, head_dim] (MLA: one latent pool). Either it allocates its pools, or it\n"
                        "is a view over the engine's own tensors (KvCache.from_pools), which it keeps alive.")
      .def(
          "__init__",
          [](PyKvCache* self, int num_layers, int num_pages, int page_size, int num_kv_heads, int head_dim,
             std::optional<int> head_dim_v, nb::handle dtype, nb::handle device, float k_scale, float v_scale,
             bool mla, const std::string& latent_format) {
            KvCacheConfig c;
            ATTNKIT_CHECK(latent_format == "plain" || latent_format == "fp8_blocked",
                          "KvCache: latent_format must be 'plain' or 'fp8_blocked', got '", latent_format, "'");
            c.latent_format = latent_format == "fp8_blocked" ? LatentFormat::fp8_blocked : LatentFormat::plain;
            c.num_layers = num_layers;
            c.num_pages = num_pages;
            c.page_size = page_size;
            c.num_kv_heads = num_kv_heads;
            c.head_dim_k = head_dim;
            c.head_dim_v = head_dim_v.value_or(head_dim);
            c.dtype = parse_dtype_arg({"KvCache", "dtype"}, dtype);
            c.device = parse_device_arg({"KvCache", "device"}, device);
            c.k_scale = k_scale;
            c.v_scale = v_scale;
            c.mla = mla;
            new (self) PyKvCache();
            self->cache = std::make_unique<KvCache>(c);
          },
          nb::arg("num_layers"), nb::arg("num_pages"), nb::arg("page_size"), nb::arg("num_kv_heads"),
          nb::arg("head_dim"), nb::kw_only(), nb::arg("head_dim_v") = nb::none(), nb::arg("dtype") = "bf16",
          nb::arg("device") = "cpu", nb::arg("k_scale") = 1.0f, nb::arg("v_scale") = 1.0f, nb::arg("mla") = false,
          nb::arg("latent_format") = "plain",
          "A cache with pools of its own. dtype: 'bf16', 'f16', 'f32' (CPU backends) or 'e4m3' (stored = value /\n"
          "scale), or a torch dtype; device: 'cpu' or 'cuda'. Pool contents are unspecified until written.\n"
          "latent_format 'fp8_blocked' (MLA, e4m3): e4m3 values in blocks of 128 with an fp32 scale each, RoPE\n"
          "in bf16 (656 bytes a deepseek-v3 token); its pools are views of bytes [num_pages, page_size, slot bytes].")
      .def_static("from_pools", &from_pools, nb::arg("kv_pool") = nb::none(), nb::kw_only(),
                  nb::arg("k_pools") = nb::none(), nb::arg("v_pools") = nb::none(), nb::arg("page_size") = nb::none(),
                  nb::arg("k_scale") = 1.0f, nb::arg("v_scale") = 1.0f, nb::arg("mla") = false,
                  nb::rv_policy::take_ownership,
                  "A cache over the engine's tensors, zero copy, with dtype and device taken from them:\n"
                  "  kv_pool: one tensor [num_layers, 2, num_pages, page_size, num_kv_heads, head_dim] (K then V), or\n"
                  "           a list of one [2, num_pages, page_size, num_kv_heads, head_dim] tensor a layer;\n"
                  "  k_pools, v_pools: lists of [num_pages, page_size, num_kv_heads, head_dim] tensors, or of\n"
                  "           [num_slots, num_kv_heads, head_dim] with page_size given (MLA: k_pools only, mla=True).\n"
                  "Every pool contiguous, one dtype and device. The cache holds references to the tensors.")
      .def_prop_ro("num_layers", [](const PyKvCache& c) { return c.cache->config().num_layers; })
      .def_prop_ro("num_pages", [](const PyKvCache& c) { return c.cache->config().num_pages; })
      .def_prop_ro("page_size", [](const PyKvCache& c) { return c.cache->config().page_size; })
      .def_prop_ro("num_kv_heads", [](const PyKvCache& c) { return c.cache->config().num_kv_heads; })
      .def_prop_ro("head_dim_k", [](const PyKvCache& c) { return c.cache->config().head_dim_k; })
      .def_prop_ro("head_dim_v", [](const PyKvCache& c) { return c.cache->config().head_dim_v; })
      .def_prop_ro("mla", [](const PyKvCache& c) { return c.cache->config().mla; })
      .def_prop_ro("latent_format", [](const PyKvCache& c) {
        return std::string(c.cache->config().latent_format == LatentFormat::fp8_blocked ? "fp8_blocked" : "plain");
      })
      .def_prop_ro("dtype", [](const PyKvCache& c) { return std::string(dtype_name(c.cache->config().dtype)); })
      .def_prop_ro("device", [](const PyKvCache& c) { return std::string(device_name(c.cache->config().device)); })
      .def_prop_ro("owns_pools", [](const PyKvCache& c) { return c.pool_owners.empty(); },
                   "False for a view over the caller's tensors.")
      .def("k_pool", [](PyKvCache& c, int layer) { return pool_array(c, layer, false); }, nb::arg("layer"),
           "Layer's K pool (MLA: the latent), [num_pages, page_size, num_kv_heads, head_dim_k], zero copy\n"
           "(torch.from_dlpack / numpy.from_dlpack).")
      .def("v_pool", [](PyKvCache& c, int layer) { return pool_array(c, layer, true); }, nb::arg("layer"),
           "Layer's V pool, [num_pages, page_size, num_kv_heads, head_dim_v], zero copy (MLA: the latent).")
      .def("add_request", [](PyKvCache& c) { return c.cache->add_request(); },
           "A new request of length 0 in the cache's own page tables; its id.")
      .def("reserve", [](PyKvCache& c, RequestId id, int64_t length) { c.cache->reserve(id, length); },
           nb::arg("request_id"), nb::arg("length"),
           "Grows a request to `length` tokens, all or nothing (attnkit.OutOfPagesError leaves it as it was).")
      .def("free_request", [](PyKvCache& c, RequestId id) { c.cache->free_request(id); }, nb::arg("request_id"))
      .def("length", [](const PyKvCache& c, RequestId id) { return c.cache->length(id); }, nb::arg("request_id"))
      .def("pages", [](const PyKvCache& c, RequestId id) { return c.cache->pages(id); }, nb::arg("request_id"))
      .def_prop_ro("num_free_pages", [](const PyKvCache& c) { return c.cache->allocator().num_free(); })
      .def(
          "store",
          [](PyKvCache& c, int layer, nb::handle k, nb::handle v, nb::handle out_cache_loc) {
            const char* who = "cache store";
            c.cache->store(layer, view_of({who, "k"}, k), v.is_none() ? TensorView() : view_of({who, "v"}, v),
                           view_of({who, "out_cache_loc"}, out_cache_loc));
          },
          nb::arg("layer"), nb::arg("k"), nb::arg("v").none(), nb::arg("out_cache_loc"),
          "Writes k [num_tokens, num_kv_heads, head_dim_k] and v at the slots out_cache_loc (int64 [num_tokens],\n"
          "on the cache's device), converting to the cache dtype; forward does this itself.")
      .def("__repr__", [](const PyKvCache& c) {
        const KvCacheConfig& cfg = c.cache->config();
        return "KvCache(" + std::to_string(cfg.num_layers) + " layers, " + std::to_string(cfg.num_pages) + " pages of " +
               std::to_string(cfg.page_size) + ", " + std::to_string(cfg.num_kv_heads) + " kv heads of " +
               std::to_string(cfg.head_dim_k) + "/" + std::to_string(cfg.head_dim_v) + ", " +
               std::string(dtype_name(cfg.dtype)) + " " + std::string(device_name(cfg.device)) +
               (c.pool_owners.empty() ? ")" : ", caller's pools)");
      });
}

}  // namespace attnkit::python
