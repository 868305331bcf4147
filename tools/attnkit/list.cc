// `attnkit list`: every registered backend, whether it can run here (and why not), its capabilities.
#include <iostream>

#include <nlohmann/json.hpp>

#include "attnkit/registry.h"
#include "commands.h"
#include "format.h"

namespace attnkit::tool {

namespace {

std::string join_dtypes(const std::vector<DType>& v) {
  std::string s;
  for (DType d : v) s += (s.empty() ? "" : ",") + std::string(dtype_name(d));
  return s;
}

std::string join_ints(const std::vector<int>& v, const char* if_empty) {
  if (v.empty()) return if_empty;
  std::string s;
  for (int d : v) s += (s.empty() ? "" : ",") + std::to_string(d);
  return s;
}

std::vector<std::string> features(const Capabilities& c) {
  std::vector<std::string> f;
  auto add = [&](bool on, const char* name) {
    if (on) f.emplace_back(name);
  };
  add(c.extend, "extend");
  add(c.decode, "decode");
  add(c.mixed, "mixed");
  add(c.gqa, "gqa");
  add(c.mla, "mla");
  add(c.causal, "causal");
  add(c.non_causal, "full");
  add(c.window, "window");
  add(c.soft_cap, "softcap");
  add(c.sinks, "sinks");
  add(c.custom_mask, "custom-mask");
  add(c.cuda_graph, "cuda-graph");
  return f;
}

}  // namespace

std::function<int()> add_list(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("list", "List the backends, their availability here and their capabilities");
  auto json = std::make_shared<bool>(false);
  auto preset = std::make_shared<std::string>("llama3-8b");
  cmd->add_flag("--json", *json, "Print JSON instead of a table");
  cmd->add_option("--preset", *preset, "Model preset for the `auto` line")->check(CLI::IsMember(preset_names()));
  return [json, preset] {
    const Registry& registry = Registry::global();
    nlohmann::json out = nlohmann::json::array();
    std::vector<std::vector<std::string>> rows = {
        {"backend", "device", "available", "q dtypes", "kv dtypes", "head dims", "pages", "features"}};
    for (const BackendInfo& b : registry.all()) {
      const std::string why = b.why_unavailable ? b.why_unavailable() : std::string();
      const Capabilities c = b.capabilities();
      std::string feats;
      for (const auto& f : features(c)) feats += (feats.empty() ? "" : " ") + f;
      const std::string pages = std::to_string(c.min_page_size) + ".." + std::to_string(c.max_page_size);
      rows.push_back({b.name, std::string(device_name(b.device)), why.empty() ? "yes" : "no: " + why,
                      join_dtypes(c.q_dtypes), join_dtypes(c.kv_dtypes), join_ints(c.head_dims, "any"), pages, feats});
      out.push_back({{"name", b.name},
                     {"description", b.description},
                     {"device", device_name(b.device)},
                     {"available", why.empty()},
                     {"why_unavailable", why},
                     {"q_dtypes", join_dtypes(c.q_dtypes)},
                     {"kv_dtypes", join_dtypes(c.kv_dtypes)},
                     {"head_dims", c.head_dims},
                     {"mla_dims", c.mla_dims},
                     {"min_page_size", c.min_page_size},
                     {"max_page_size", c.max_page_size},
                     {"features", features(c)}});
    }
    // What `auto` would pick for the preset, on the GPU if there is one, else on the CPU.
    const ModelSpec model = make_preset(*preset);
    KvCacheConfig cache;
    cache.num_kv_heads = model.layer(0).num_kv_heads;
    cache.head_dim_k = model.layer(0).head_dim_qk;
    cache.head_dim_v = model.layer(0).head_dim_vo;
    cache.mla = model.layer(0).is_mla();
    cache.device = cuda_available() ? Device::cuda : Device::cpu;
    std::string auto_line;
    try {
      const Selection s = select_backend(model.layer(0), cache);
      auto_line = s.backend + " (" + s.reason + ")";
    } catch (const Error& e) {
      auto_line = std::string("none: ") + e.what();
    }
    if (*json) {
      std::cout << nlohmann::json{{"backends", out}, {"auto", {{"preset", *preset}, {"choice", auto_line}}}}.dump(2)
                << '\n';
      return 0;
    }
    print_table(rows);
    std::cout << "\nauto for " << *preset << " on " << device_name(cache.device) << ": " << auto_line << '\n';
    for (const BackendInfo& b : registry.all()) std::cout << "  " << b.name << ": " << b.description << '\n';
    return 0;
  };
}

}  // namespace attnkit::tool
