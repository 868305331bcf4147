// Validators and helpers shared by the subcommands (options.h).
#include "options.h"


#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "attnkit/backend.h"
#include "attnkit/cpu_target.h"
#include "attnkit/registry.h"

namespace attnkit::tool {

CLI::Validator writable_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (path.empty()) return "expected a file name, got ''";
        if (fs::is_directory(path, ec)) return "'" + path + "' is a folder; expected a file name";
        const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
        if (!fs::exists(parent, ec)) return "the folder '" + parent.string() + "' of '" + path + "' does not exist";
        if (!fs::is_directory(parent, ec)) {
          return "'" + parent.string() + "' is not a folder, so '" + path + "' cannot be written";
        }
        const bool exists = fs::exists(path, ec);
        const std::string probe = exists ? path : parent.string();
        if (::access(probe.c_str(), W_OK) != 0) {
          return "'" + path + "' cannot be written (" + (exists ? "the file" : "its folder") + ": " +
                 std::strerror(errno) + ")";
        }
        return {};
      },
      "FILE");
}

CLI::Validator trace_path() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (path == "builtin") return {};
        if (std::filesystem::is_directory(path, ec)) {
          return "'" + path + "' is a folder; expected a trace file or builtin";
        }
        if (!std::filesystem::exists(path, ec)) return "no file '" + path + "'; expected a trace file or builtin";
        return {};
      },
      "FILE|builtin");
}

CLI::Validator whole_number(int64_t lo, int64_t hi, bool or_zero) {
  const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, or_zero](std::string& text) -> std::string {
        int64_t v = 0;
        const bool number = CLI::detail::lexical_cast(text, v);
        if (!number || ((v < lo || v > hi) && !(or_zero && v == 0))) {
          return std::string("expected ") + (or_zero ? "0 or " : "") + "a whole number from " + std::to_string(lo) +
                 " to " + std::to_string(hi) + ", got '" + text + "'";
        }
        return {};
      },
      hi <= 100000 ? (or_zero ? "0|" : "") + range : std::string());
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "expected a number, got '" + text + "'";
        if (!(v > 0)) return "must be > 0, got " + text;
        return {};
      },
      "> 0");
}

CLI::Validator unsigned_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits =
            !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!digits) return "expected a whole number >= 0, got '" + text + "'";
        return {};
      },
      "");
}

void add_threads_option(CLI::App& cmd) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cmd.add_option_function<int>(
         "--threads", [](const int& n) { set_cpu_threads(n); },
         "Threads of the cpu backend (default: ATTNKIT_CPU_THREADS, else one a core: " + std::to_string(cores) + ")")
      ->check(whole_number(1, 1024));
}

void add_latent_option(CLI::App& cmd, LatentFormat* format) {
  cmd.add_option_function<std::string>(
         "--latent",
         [format](const std::string& v) { *format = v == "fp8-blocked" ? LatentFormat::fp8_blocked : LatentFormat::plain; },
         "MLA latent layout: plain, or fp8-blocked (with --kv-dtype e4m3: e4m3 in blocks of 128 with their scales, RoPE "
         "bf16)")
      ->check(CLI::IsMember({"plain", "fp8-blocked"}))
      ->default_str("plain");
}

void add_model_options(CLI::App& cmd, ModelEdits* edits) {
  cmd.add_option("--heads", edits->heads, "Query heads of every layer (default: the preset's)")->check(whole_number(1, 1024));
  cmd.add_option("--head-dim", edits->head_dim,
                 "Head dim of every layer, QK or QK/VO (e.g. 96, 192/128; default: the preset's)");
  cmd.add_option("--score-mod", edits->score_mod,
                 "A C++ expression that rewrites each scaled logit, e.g. 'score - 0.0625f * (q_pos - kv_pos)' (ALiBi)");
  cmd.add_option("--mask-mod", edits->mask_mod,
                 "A C++ expression true where a key is visible, on top of causal and window, e.g. 'kv_pos / 512 == q_pos / 512'");
  cmd.add_option("--soft-cap", edits->soft_cap,
                 "Logit soft-cap of every layer: scaled logits become cap * tanh(logits / cap) (default: the preset's)")
      ->check(CLI::PositiveNumber);
}

ModelSpec with_edits(ModelSpec model, const ModelEdits& edits) {
  int dk = 0, dv = 0;
  if (!edits.head_dim.empty()) {
    int used = 0;
    const char* text = edits.head_dim.c_str();
    const bool one = std::sscanf(text, "%d%n", &dk, &used) == 1 && text[used] == '\0';
    const bool two = !one && std::sscanf(text, "%d/%d%n", &dk, &dv, &used) == 2 && text[used] == '\0';
    ATTNKIT_CHECK((one || two) && dk > 0 && (one || dv > 0),
                  "--head-dim: expected QK or QK/VO (e.g. 96 or 192/128), got '", edits.head_dim, "'");
    if (one) dv = dk;
  }
  for (AttentionSpec& s : model.layers) {
    if (dk != 0) {
      ATTNKIT_CHECK(!s.is_mla(), "--head-dim: the preset's layers are MLA, whose head dims are fixed");
      s.head_dim_qk = dk;
      s.head_dim_vo = dv;
      s.sm_scale = 0.0f;  // the default, 1 / sqrt(head_dim_qk), for the new head dim
    }
    if (edits.heads != 0) {
      ATTNKIT_CHECK(edits.heads % s.num_kv_heads == 0, "--heads must be a multiple of the preset's ", s.num_kv_heads,
                    " KV heads, got ", edits.heads);
      s.num_qo_heads = edits.heads;
      if (!s.sinks.empty()) s.sinks.resize(static_cast<size_t>(edits.heads), s.sinks.back());
    }
    s.score_mod = edits.score_mod;
    s.mask_mod = edits.mask_mod;
    if (edits.soft_cap > 0.0f) s.logits_soft_cap = edits.soft_cap;
    s.validate();
  }
  if (edits.heads != 0) model.name += "-h" + std::to_string(edits.heads);
  if (dk != 0) model.name += "-d" + edits.head_dim;
  if (edits.soft_cap > 0.0f) model.name += detail::concat("-cap", edits.soft_cap);
  return model;
}

void add_cpu_target_option(CLI::App& cmd) {
  std::vector<std::string> targets = cpu_targets();
  targets.push_back("best");
  cmd.add_option_function<std::string>(
         "--cpu-target", [](const std::string& name) { set_cpu_target(name); },
         "cpu: run the kernels on this SIMD target (Highway's name, one this CPU runs; default: the best)")
      ->check(CLI::IsMember(targets, CLI::ignore_case));
}

void add_backend_options(CLI::App& cmd, BackendOptions* options) {
  using Join = BackendOptions::DecodeJoin;
  cmd.add_option_function<std::string>(
         "--decode-join",
         [options](const std::string& v) {
           options->decode_join = v == "two-level" ? Join::two_level : v == "all-wait-plain" ? Join::all_wait_plain
                                                                                            : Join::all_wait;
         },
         "planned: how wide split decodes are joined: all-wait (by all their CTAs, cooperative launch), "
         "two-level (by the last CTA, plain launch), all-wait-plain (planned all-wait, launched plainly)")
      ->check(CLI::IsMember({"all-wait", "two-level", "all-wait-plain"}))
      ->default_str("all-wait");
  cmd.add_option_function<std::string>(
         "--cpu-bf16-dot", [options](const std::string& v) { options->cpu_bf16_dot = v == "true"; },
         "cpu: bf16 products through AVX512-BF16 where the CPU has it (true), or f32 products (false)")
      ->check(CLI::IsMember({"true", "false"}))
      ->default_str("true");
  cmd.add_option_function<std::string>(
         "--hopper-kv-load",
         [options](const std::string& v) {
           options->hopper_kv_load =
               v == "gather" ? BackendOptions::HopperKvLoad::gather : BackendOptions::HopperKvLoad::by_page_size;
         },
         "hopper: K/V tiles into shared memory as TMA boxes where pages have 8 slots or more, else gathered with "
         "cp.async (by-page-size), or gathered whatever the page size (gather)")
      ->check(CLI::IsMember({"by-page-size", "gather"}))
      ->default_str("by-page-size");
  cmd.add_flag("--hopper-fp8-products", options->hopper_fp8_products,
               "hopper: an e4m3 cache multiplied on e4m3 tensor cores, q quantised a row at a time, where the cache "
               "allows it (head dim 128, pages of 8 slots or more), instead of dequantised to q's type as tiles load");
}

void require_available(const std::string& subcommand, const std::string& backend) {
  const BackendInfo& info = Registry::global().get(backend);
  const std::string why = info.why_unavailable ? info.why_unavailable() : std::string();
  if (!why.empty()) throw Error(subcommand + ": backend " + backend + " cannot run here: " + why);
}

std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_d = 0;
  for (const std::string& c : candidates) {
    const size_t d = distance(word, c);
    if (best.empty() || d < best_d) {
      best = c;
      best_d = d;
    }
  }
  // A typo: at most a third of the word's letters wrong (and at least one allowed).
  return !best.empty() && best_d <= std::max<size_t>(1, word.size() / 3) ? best : std::string();
}

std::string count_of(size_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

}  // namespace attnkit::tool
