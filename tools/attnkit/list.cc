// `attnkit list`: every registered backend, whether it can run here (and why not), its capabilities.
#include <algorithm>
#include <iostream>

#include <nlohmann/json.hpp>

#include "attnkit/registry.h"
#include "attnkit/tuning.h"
#include "commands.h"
#include "format.h"

namespace attnkit::tool {

namespace {

std::vector<std::string> dtype_names(const std::vector<DType>& v) {
  std::vector<std::string> names;
  for (DType d : v) names.emplace_back(dtype_name(d));
  return names;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// A list of sizes, or "any" where the backend takes every size (JSON).
nlohmann::json sizes_or_any(const std::vector<int>& v) { return v.empty() ? nlohmann::json("any") : nlohmann::json(v); }

// What each word of `features` means (list --help and the README).
constexpr const char* kFeatureWords =
    "Features: extend (prefill and chunked prefill: several new tokens a request), decode (one new token a "
    "request), mixed (both in one batch), mha (standard attention over K and V heads, not MLA), gqa (fewer "
    "KV heads than query heads), mla (DeepSeek's multi-head latent attention), causal (each token sees those "
    "before it), full (non-causal: every new token sees all), window (sliding window), softcap (logit soft-capping), "
    "sinks (attention sinks), custom-mask (a given mask), variants (user-defined score_mod / mask_mod), cuda-graph (its calls can be captured in a CUDA graph), "
    "lse (forward can also return each row's log-sum-exp, for merging partial states), fp8-latent (an MLA "
    "cache in the fp8_blocked layout: e4m3 NoPE values in blocks of 128 with their scales, RoPE in bf16).\n"
    "JSON: dtypes and features are arrays of words; head_dims and mla_dims are arrays of sizes or \"any\"; "
    "max_head_dim is a number or \"any\" (a limit only where head_dims is \"any\"); auto.table is the tuning "
    "table's file or null (the written rules).";

std::string join_ints(const std::vector<int>& v, const char* if_empty) {
  if (v.empty()) return if_empty;
  std::string s;
  for (int d : v) s += (s.empty() ? "" : ",") + std::to_string(d);
  return s;
}

// Page sizes for the table: a run of three or more powers of two, each twice the last, as
// "A..B, 2^k" (the table stays narrow); else the list.
std::string page_sizes_text(const std::vector<int>& v) {
  bool doubling = v.size() >= 3;
  for (size_t i = 1; doubling && i < v.size(); ++i) doubling = v[i] == 2 * v[i - 1];
  if (doubling && (v.front() & (v.front() - 1)) == 0)
    return std::to_string(v.front()) + ".." + std::to_string(v.back()) + ", 2^k";
  return join_ints(v, "any");
}

// A cache that must match q where it is 16-bit reads "q's", with ",e4m3" where an e4m3 one is
// dequantised.
std::string kv_dtypes_text(const Capabilities& c) {
  if (!c.kv_dtype_is_q_dtype) return join(dtype_names(c.kv_dtypes), ",");
  const bool e4m3 = std::find(c.kv_dtypes.begin(), c.kv_dtypes.end(), DType::e4m3) != c.kv_dtypes.end();
  return e4m3 ? "q's,e4m3" : "q's";
}

std::vector<std::string> features(const Capabilities& c) {
  std::vector<std::string> f;
  auto add = [&](bool on, const char* name) {
    if (on) f.emplace_back(name);
  };
  add(c.extend, "extend");
  add(c.decode, "decode");
  add(c.mixed, "mixed");
  add(c.mha, "mha");
  add(c.gqa, "gqa");
  add(c.mla, "mla");
  add(c.causal, "causal");
  add(c.non_causal, "full");
  add(c.window, "window");
  add(c.soft_cap, "softcap");
  add(c.sinks, "sinks");
  add(c.custom_mask, "custom-mask");
  add(c.variants, "variants");
  add(c.cuda_graph, "cuda-graph");
  add(c.lse, "lse");
  add(c.fp8_blocked_latent, "fp8-latent");
  return f;
}

// A batch that carries only the shape `auto` looks at (no cache behind it).
ForwardBatch shape_only_batch(ForwardMode mode, int batch_size, int kv_len) {
  ForwardBatch b;
  b.mode = mode;
  b.page_size = 16;
  const int qo = mode == ForwardMode::decode ? 1 : kv_len;
  const int pages = (kv_len + 15) / 16;
  b.qo_indptr.push_back(0);
  b.kv_page_indptr.push_back(0);
  for (int i = 0; i < batch_size; ++i) {
    b.qo_indptr.push_back(b.qo_indptr.back() + qo);
    b.kv_page_indptr.push_back(b.kv_page_indptr.back() + pages);
    b.kv_last_page_len.push_back((kv_len - 1) % 16 + 1);
    b.prefix_lens.push_back(kv_len - qo);
  }
  b.kv_page_indices.assign(static_cast<size_t>(b.kv_page_indptr.back()), 0);
  return b;
}

}  // namespace

std::function<int()> add_list(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("list", "List the backends, their availability here and their capabilities");
  auto json = std::make_shared<bool>(false);
  auto preset = std::make_shared<std::string>("llama3-8b");
  cmd->footer(kFeatureWords);
  cmd->add_flag("--json", *json, "Print JSON instead of a table");
  cmd->add_option("--preset", *preset, "Model preset for the `auto` line")->check(CLI::IsMember(preset_names()));
  return [json, preset] {
    const Registry& registry = Registry::global();
    nlohmann::json out = nlohmann::json::array();
    std::vector<std::vector<std::string>> rows = {
        {"backend", "device", "available", "q dtypes", "kv dtypes", "head dims", "pages", "features"}};
    std::vector<std::string> notes;  // why a backend cannot run here, under the table
    for (const BackendInfo& b : registry.all()) {
      const std::string why = b.why_unavailable ? b.why_unavailable() : std::string();
      const Capabilities c = b.capabilities();
      const std::string pages = c.page_sizes.empty()
                                    ? std::to_string(c.min_page_size) + ".." + std::to_string(c.max_page_size)
                                    : page_sizes_text(c.page_sizes);
      // An MLA-only backend's dims are its latent's: kv_lora_rank + rope.
      const std::string dims = !c.mha && c.mla ? join_ints(c.mla_dims, "any") + "+" + join_ints(c.mla_rope_dims, "any")
                               : c.head_dims.empty() && c.max_head_dim > 0 ? "<=" + std::to_string(c.max_head_dim)
                                                                           : join_ints(c.head_dims, "any");
      rows.push_back({b.name, std::string(device_name(b.device)), why.empty() ? "yes" : "no (below)",
                      join(dtype_names(c.q_dtypes), ","),
                      kv_dtypes_text(c), dims, pages,
                      join(features(c), " ")});
      if (!why.empty()) notes.push_back(b.name + ": not available here: " + why);
      const int max_dim =
          c.head_dims.empty() ? c.max_head_dim : *std::max_element(c.head_dims.begin(), c.head_dims.end());
      out.push_back({{"name", b.name},
                     {"description", b.description},
                     {"device", device_name(b.device)},
                     {"available", why.empty()},
                     {"why_unavailable", why},
                     {"q_dtypes", dtype_names(c.q_dtypes)},
                     {"kv_dtypes", dtype_names(c.kv_dtypes)},
                     {"kv_dtype_is_q_dtype", c.kv_dtype_is_q_dtype},
                     {"head_dims", sizes_or_any(c.head_dims)},
                     {"max_head_dim", max_dim > 0 ? nlohmann::json(max_dim) : nlohmann::json("any")},
                     {"mla_dims", c.mla ? sizes_or_any(c.mla_dims) : nlohmann::json::array()},
                     {"mla_rope_dims", c.mla ? sizes_or_any(c.mla_rope_dims) : nlohmann::json::array()},
                     {"page_sizes", sizes_or_any(c.page_sizes)},
                     {"min_page_size", c.min_page_size},
                     {"max_page_size", c.max_page_size},
                     {"features", features(c)}});
    }
    // What `auto` picks for the preset on a decode and a prefill batch, on the GPU if there is one.
    const ModelSpec model = make_preset(*preset);
    KvCacheConfig cache = KvCacheConfig::for_spec(model.layer(0));
    cache.device = cuda_available() ? Device::cuda : Device::cpu;
    const std::string table = tuning_table_source();  // empty: the written rules
    nlohmann::json auto_json = {{"preset", *preset}, {"table", table.empty() ? nlohmann::json() : nlohmann::json(table)}};
    std::vector<std::string> auto_lines;
    for (const auto& [label, batch] : {std::pair{"decode 8 x 4096", shape_only_batch(ForwardMode::decode, 8, 4096)},
                                      std::pair{"prefill 1 x 512", shape_only_batch(ForwardMode::extend, 1, 512)}}) {
      std::string backend, reason;
      try {
        const Selection s = select_backend(model, cache, &batch);
        backend = s.backend;
        reason = s.reason;  // "chose NAME (rule)", after the ones passed over
      } catch (const Error& e) {
        reason = e.what();
      }
      auto_json[label] = {{"backend", backend.empty() ? nlohmann::json() : nlohmann::json(backend)}, {"reason", reason}};
      auto_lines.push_back(std::string(label) + ": " + (backend.empty() ? "none: " : "") + reason);
    }
    if (*json) {
      std::cout << nlohmann::json{{"backends", out}, {"auto", auto_json}}.dump(2) << '\n';
      return 0;
    }
    print_table(rows);
    if (!notes.empty()) std::cout << '\n';
    for (const std::string& n : notes) std::cout << n << '\n';
    std::cout << "\nauto for " << *preset << " on " << device_name(cache.device) << " ("
              << (table.empty() ? "written rules; no tuning table (ATTNKIT_TUNE_TABLE)" : "tuning table " + table) << "):\n";
    for (const auto& line : auto_lines) std::cout << "  " << line << '\n';
    std::cout << "backends:\n";
    for (const BackendInfo& b : registry.all()) std::cout << "  " << b.name << ": " << b.description << '\n';
    return 0;
  };
}

}  // namespace attnkit::tool
