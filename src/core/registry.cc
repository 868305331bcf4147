// The backend registry, `auto` selection by written rules, and hybrid prefill/decode pairs.
#include "attnkit/registry.h"

#include <algorithm>

#include "attnkit/tuning.h"
#include "core/backend_order.h"
#include "core/builtin_backends.h"

namespace attnkit {

// src/core/auto_backend.cc
std::unique_ptr<AttentionBackend> create_auto_backend(const BackendContext& context);

Registry& Registry::global() {
  static Registry* registry = [] {
    auto* r = new Registry();
    register_builtin_backends(*r);
    return r;
  }();
  return *registry;
}

void Registry::add(BackendInfo info) {
  for (const auto& b : backends_) {
    ATTNKIT_CHECK(b.name != info.name, "registry: a backend named '", info.name, "' is already registered");
  }
  backends_.push_back(std::move(info));
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (const auto& b : backends_) out.push_back(b.name);
  return out;
}

const BackendInfo& Registry::get(const std::string& name) const {
  for (const auto& b : backends_) {
    if (b.name == name) return b;
  }
  std::string known;
  for (const auto& b : backends_) known += (known.empty() ? "" : ", ") + b.name;
  throw Error(detail::concat("backend must be one of ", known, ", auto; got '", name, "'"));
}

Selection select_backend(const AttentionSpec& spec, const KvCacheConfig& cache, const ForwardBatch* batch) {
  ModelSpec one;
  one.name = "spec";
  one.layers = {spec};
  return select_backend(one, cache, batch);
}

Selection select_backend(const ModelSpec& model, const KvCacheConfig& cache, const ForwardBatch* batch) {
  const AttentionSpec& spec = model.layer(0);
  const Registry& registry = Registry::global();
  Selection s;
  auto try_order = [&](const auto& order, const std::string& rule) {
    for (const char* name : order) {
      const auto& all = registry.all();
      auto it = std::find_if(all.begin(), all.end(), [&](const BackendInfo& b) { return b.name == name; });
      if (it == all.end()) continue;  // not built into this library
      std::string why = it->why_unavailable ? it->why_unavailable() : std::string();
      const Capabilities caps = it->capabilities();
      for (int l = 0; l < model.num_layers() && why.empty(); ++l) {
        why = why_unsupported(caps, model.layer(l), cache, batch);
        if (!why.empty() && model.num_layers() > 1) why += detail::concat(" (layer ", l, ")");
      }
      if (why.empty()) {
        s.backend = name;
        s.reason += detail::concat(s.reason.empty() ? "" : "; ", "chose ", name, " (", rule, ")");
        return true;
      }
      s.reason += detail::concat(s.reason.empty() ? "" : "; ", name, ": ", why);
    }
    return false;
  };
  // A measured table, when there is one and it covers this batch's bucket, goes first.
  if (batch) {
    if (auto table = tuning_table()) {
      const TuningBucket bucket = bucket_for(spec, cache.device, *batch);
      if (const TuningEntry* e = table->lookup(bucket)) {
        const char* const measured[] = {e->backend.c_str()};
        s.reason = detail::concat("measured (", tuning_table_source(), ", bucket ", e->bucket.phase, " batch ",
                                  e->bucket.batch_size, " kv ", e->bucket.kv_len, ")");
        if (try_order(measured, "fastest measured in this bucket")) return s;
        s.reason += "; falling back to the written rules";
      }
    }
  }
  const std::string rule = detail::concat("first in the ", device_name(cache.device), " order that supports ",
                                          spec.describe());
  const bool found = try_order(backend_order(cache), rule);
  ATTNKIT_CHECK(found, "auto: no backend supports this spec and cache: ", s.reason);
  return s;
}

std::unique_ptr<AttentionBackend> create_backend(const std::string& name, const BackendContext& context) {
  ATTNKIT_CHECK(context.model && context.cache, "create_backend: the context needs a model and a cache");
  if (name == "auto") return create_auto_backend(context);
  const std::string& chosen = name;
  const BackendInfo& info = Registry::global().get(chosen);
  if (info.why_unavailable) {
    const std::string why = info.why_unavailable();
    ATTNKIT_CHECK(why.empty(), chosen, ": not available on this machine: ", why);
  }
  return info.create(context);
}

}  // namespace attnkit
