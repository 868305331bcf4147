// Backend from Python: made by name (or as a prefill/decode pair), plan(batch) once a step,
// forward(layer, q, k, v, out) a layer, every tensor checked and passed zero copy; list_backends
// and select_backend say what runs here and why.
#include "backend.h"

#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "attnkit/registry.h"
#include "bindings.h"
#include "tensors.h"

namespace attnkit::python {

ModelSpec model_of(nb::handle spec, int num_layers) {
  if (nb::isinstance<ModelSpec>(spec)) return nb::cast<ModelSpec>(spec);
  ATTNKIT_CHECK(nb::isinstance<AttentionSpec>(spec), "Backend: spec must be an attnkit.AttentionSpec or ModelSpec, got ",
                nb::type_name(spec.type()).c_str());
  ModelSpec model;
  model.name = "spec";
  model.layers.assign(static_cast<size_t>(num_layers), nb::cast<AttentionSpec>(spec));
  return model;
}

PyBackend::PyBackend(ModelSpec model, nb::object cache_owner, PyKvCache& cache,
                     const std::function<std::unique_ptr<AttentionBackend>(const BackendContext&)>& make)
    : model_(std::move(model)), cache_owner_(std::move(cache_owner)), cache_(&cache) {
  BackendOptions options;
  backend_ = make({&model_, cache_->cache.get(), options});
  who_ = backend_->name() + " forward";
  if (on_cuda()) join_.create_events();
}

void PyBackend::plan(nb::object batch, nb::handle stream) {
  ATTNKIT_CHECK(nb::isinstance<PyBatch>(batch), backend_->name(), " plan: batch must be an attnkit.Batch, got ",
                nb::type_name(batch.type()).c_str());
  const uintptr_t caller = on_cuda() ? StreamJoin::resolve(stream, device_id()) : 0;
  batch_owner_ = nb::none();  // a failed plan keeps no stale batch (the C++ backend forgets it too)
  const ForwardBatch& step = nb::cast<PyBatch&>(batch).batch;
  {
    nb::gil_scoped_release released;
    backend_->init_forward_metadata(step);
  }
  batch_owner_ = std::move(batch);
  // The plan's upload is ordered before whatever the caller queues next (a graph replay included).
  if (on_cuda()) join_.leave(caller);
}

void PyBackend::forward(Entry entry, int layer, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                        nb::handle lse, nb::handle stream) {
  const char* who = who_.c_str();
  const int id = on_cuda() ? device_id() : -1;
  const TensorView tq = view_of({who, "q"}, q, id);
  const TensorView tk = view_of({who, "k"}, k, id);
  const TensorView tv = v.is_none() ? TensorView() : view_of({who, "v"}, v, id);
  const TensorView to = view_of({who, "out"}, out, id);
  const TensorView tl = lse.is_none() ? TensorView() : view_of({who, "lse"}, lse, id);
  const bool cuda = on_cuda();
  uintptr_t caller = 0;
  if (cuda) {
    caller = StreamJoin::resolve(stream, device_id());
    join_.enter(caller);
  }
  {
    // The tensors are held by the caller's frame; a CPU backend computes here, so other Python
    // threads (an engine's scheduler) run meanwhile.
    nb::gil_scoped_release released;
    switch (entry) {
      case Entry::forward: backend_->forward(layer, tq, tk, tv, to, tl); break;
      case Entry::extend: backend_->forward_extend(layer, tq, tk, tv, to, tl); break;
      case Entry::decode: backend_->forward_decode(layer, tq, tk, tv, to, tl); break;
    }
    if (cuda) join_.leave(caller);
  }
}

nb::dict capabilities_dict(const Capabilities& caps) {
  auto names = [](const std::vector<DType>& dtypes) {
    nb::list l;
    for (DType d : dtypes) l.append(std::string(dtype_name(d)));
    return l;
  };
  auto sizes_or_any = [](const std::vector<int>& v) -> nb::object {
    if (v.empty()) return nb::str("any");
    return nb::cast(v);
  };
  nb::dict d;
  d["device"] = std::string(device_name(caps.device));
  d["cache_layout"] = caps.cache_layout;
  d["q_dtypes"] = names(caps.q_dtypes);
  d["kv_dtypes"] = names(caps.kv_dtypes);
  d["head_dims"] = sizes_or_any(caps.head_dims);
  d["max_head_dim"] = caps.max_head_dim == 0 ? nb::object(nb::str("any")) : nb::cast(caps.max_head_dim);
  d["mla"] = caps.mla;
  d["mla_dims"] = sizes_or_any(caps.mla_dims);
  d["min_page_size"] = caps.min_page_size;
  d["max_page_size"] = caps.max_page_size;
  const std::pair<const char*, bool> features[] = {
      {"extend", caps.extend}, {"decode", caps.decode}, {"mixed", caps.mixed}, {"gqa", caps.gqa},
      {"mha", caps.mha}, {"causal", caps.causal}, {"non_causal", caps.non_causal}, {"window", caps.window},
      {"soft_cap", caps.soft_cap}, {"sinks", caps.sinks}, {"custom_mask", caps.custom_mask},
      {"cuda_graph", caps.cuda_graph}, {"lse", caps.lse}};
  for (const auto& [name, on] : features) d[name] = on;
  return d;
}

namespace {

// The Python KvCache object and its C++ side, for a constructor's `cache` argument.
PyKvCache& cache_arg(nb::handle cache) {
  ATTNKIT_CHECK(nb::isinstance<PyKvCache>(cache), "Backend: cache must be an attnkit.KvCache, got ",
                nb::type_name(cache.type()).c_str());
  return nb::cast<PyKvCache&>(cache);
}

BackendOptions::DecodeJoin parse_decode_join(const std::string& text) {
  if (text == "all-wait") return BackendOptions::DecodeJoin::all_wait;
  if (text == "two-level") return BackendOptions::DecodeJoin::two_level;
  if (text == "all-wait-plain") return BackendOptions::DecodeJoin::all_wait_plain;
  throw Error("Backend: decode_join must be all-wait, two-level or all-wait-plain, got '" + text + "'");
}

const char* kForwardDoc =
    "Stores k and v at the batch's out_cache_loc in layer `layer`'s pools, then attends each new token to\n"
    "its prefix and the new tokens (causal unless the spec says otherwise), writing `out`. Shapes:\n"
    "q [num_tokens, num_qo_heads, head_dim_qk], k [num_tokens, num_kv_heads, head_dim_qk],\n"
    "v [num_tokens, num_kv_heads, head_dim_vo] (MLA: k is the latent [num_tokens, 1, rank + rope], v None),\n"
    "out [num_tokens, num_qo_heads, head_dim_vo]; one dtype (bf16 or f16 on the GPU; f32 too on the CPU),\n"
    "dense (row-major), on the backend's device. On CUDA the work is queued on `stream` (a cudaStream_t as\n"
    "an int), by default torch.cuda.current_stream(). Returns `out`; with return_lse=True (or an `lse`\n"
    "tensor, f32 [num_tokens, num_qo_heads]) returns (out, lse), each row's natural-log LSE, where the\n"
    "backend's capabilities say 'lse'.";

// forward, forward_extend or forward_decode as a Python method: returns `out`, or (out, lse) when
// the LSE is asked for (return_lse=True allocates it like q: f32 [num_tokens, num_qo_heads]).
auto forward_entry(Entry entry) {
  return [entry](PyBackend& b, int layer, nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::object lse,
                 bool return_lse, nb::handle stream) -> nb::object {
    if (return_lse && lse.is_none()) {
      const Array qa = as_array({"forward", "q"}, q);
      lse = nb::module_::import_("attnkit.merge").attr("_empty_like")(q, nb::make_tuple(qa.shape(0), qa.shape(1)),
                                                                        "float32");
    }
    b.forward(entry, layer, q, k, v, out, lse, stream);
    if (lse.is_none()) return nb::borrow(out);
    return nb::make_tuple(out, lse);
  };
}

}  // namespace

void bind_backend(nb::module_& m) {

  nb::class_<PyBackend>(m, "Backend",
                        "An attention backend over one model spec and one KvCache: plan(batch) once a step, then\n"
                        "forward(layer, q, k, v, out) for every layer (the plan is reused by all of them).")
      .def(
          "__init__",
          [](PyBackend* self, const std::string& name, nb::handle spec, nb::handle cache, const std::string& decode_join,
             bool cpu_bf16_dot) {
            PyKvCache& c = cache_arg(cache);
            BackendOptions options;
            options.decode_join = parse_decode_join(decode_join);
            options.cpu_bf16_dot = cpu_bf16_dot;
            new (self) PyBackend(model_of(spec, c.cache->config().num_layers), nb::borrow(cache), c,
                                 [&](const BackendContext& ctx) {
                                   BackendContext with = ctx;
                                   with.options = options;
                                   return create_backend(name, with);
                                 });
          },
          nb::arg("name"), nb::arg("spec"), nb::arg("cache"), nb::kw_only(), nb::arg("decode_join") = "all-wait",
          nb::arg("cpu_bf16_dot") = true,
          "name: a registered backend (list_backends()) or 'auto' (the best available one for the spec, cache\n"
          "and each batch). spec: an AttentionSpec (every layer alike) or a ModelSpec. decode_join and\n"
          "cpu_bf16_dot switch between a backend's own code paths (planned, cpu), for comparisons.")
      .def_static(
          "hybrid",
          [](const std::string& prefill, const std::string& decode, nb::handle spec, nb::handle cache) {
            PyKvCache& c = cache_arg(cache);
            return new PyBackend(model_of(spec, c.cache->config().num_layers), nb::borrow(cache), c,
                                 [&](const BackendContext& ctx) { return create_hybrid_backend(prefill, decode, ctx); });
          },
          nb::arg("prefill"), nb::arg("decode"), nb::arg("spec"), nb::arg("cache"), nb::rv_policy::take_ownership,
          "Extend and mixed batches go to `prefill`, decode batches to `decode`; both must read one cache layout.")
      .def_prop_ro("name", [](PyBackend& b) { return b.get().name(); })
      .def_prop_ro("device", [](PyBackend& b) { return std::string(device_name(b.get().caps().device)); })
      .def_prop_ro("capabilities", [](PyBackend& b) { return capabilities_dict(b.get().caps()); },
                   "What the backend runs: dtypes, head dims, page sizes and features (a dict).")
      .def_prop_ro("workspace_bytes", [](PyBackend& b) { return b.get().workspace_bytes(); },
                   "Memory held beyond the cache (plan buffers, split-KV partials).")
      .def_prop_ro("batch", &PyBackend::batch, "The Batch of the last plan (None before one).")
      .def("plan", &PyBackend::plan, nb::arg("batch"), nb::kw_only(), nb::arg("stream") = nb::none(),
           "Plans `batch` for every layer (checked against the cache and the capabilities first). The batch is\n"
           "kept until the next plan. On CUDA the plan's upload is ordered before later work on `stream`.")
      .def("forward", forward_entry(Entry::forward), nb::arg("layer"), nb::arg("q"), nb::arg("k"), nb::arg("v").none(),
           nb::arg("out"), nb::kw_only(), nb::arg("lse") = nb::none(), nb::arg("return_lse") = false,
           nb::arg("stream") = nb::none(), kForwardDoc)
      .def("forward_extend", forward_entry(Entry::extend), nb::arg("layer"), nb::arg("q"), nb::arg("k"),
           nb::arg("v").none(), nb::arg("out"), nb::kw_only(), nb::arg("lse") = nb::none(), nb::arg("return_lse") = false,
           nb::arg("stream") = nb::none(),
           "forward for an extend (or mixed) batch.")
      .def("forward_decode", forward_entry(Entry::decode), nb::arg("layer"), nb::arg("q"), nb::arg("k"),
           nb::arg("v").none(), nb::arg("out"), nb::kw_only(), nb::arg("lse") = nb::none(), nb::arg("return_lse") = false,
           nb::arg("stream") = nb::none(),
           "forward for a decode batch (one new token a request).")
      .def("init_cuda_graph_state", [](PyBackend& b, int max_batch_size, int max_num_pages) {
             b.get().init_cuda_graph_state(max_batch_size, max_num_pages);
           }, nb::arg("max_batch_size"), nb::arg("max_num_pages"),
           "Fixed-address plan buffers, so a captured forward replays whatever batch was planned last (up to\n"
           "these sizes). Raises attnkit.Error where the backend has no CUDA-graph support.")
      .def("synchronize", [](PyBackend& b) { b.get().synchronize(); },
           "Waits for the backend's queued device work (attnkit's stream).")
      .def("__repr__", [](PyBackend& b) { return "Backend('" + b.get().name() + "')"; });

  m.def(
      "list_backends",
      [] {
        nb::list out;
        for (const BackendInfo& info : Registry::global().all()) {
          nb::dict d;
          d["name"] = info.name;
          d["description"] = info.description;
          d["device"] = std::string(device_name(info.device));
          const std::string why = info.why_unavailable ? info.why_unavailable() : std::string();
          d["available"] = why.empty();
          d["why_unavailable"] = why;
          d["capabilities"] = capabilities_dict(info.capabilities());
          out.append(d);
        }
        return out;
      },
      "Every backend built into this library: name, description, device, available, why_unavailable\n"
      "(empty when it runs here) and capabilities.");
  m.def(
      "select_backend",
      [](nb::handle spec, nb::handle cache) {
        PyKvCache& c = cache_arg(cache);
        const Selection s = select_backend(model_of(spec, c.cache->config().num_layers), c.cache->config());
        return nb::make_tuple(s.backend, s.reason);
      },
      nb::arg("spec"), nb::arg("cache"), "(name, reason): what 'auto' picks for the spec and cache, and why.");
}

}  // namespace attnkit::python
