// `attnkit bench`: time backends on one workload and print latency, tokens/s and FLOP/s or bytes/s,
// optionally as a fraction of this machine's measured ceilings.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "attnkit/cpu_target.h"
#include "attnkit/error.h"
#include "attnkit/jit.h"
#include "attnkit/registry.h"
#include "ceilings.h"
#include "commands.h"
#include "format.h"
#include "harness/bench.h"
#include "run_info.h"
#include "harness/ceilings.h"
#include "options.h"

namespace attnkit::tool {

namespace {

struct Options {
  std::string backend = "all";
  std::string preset = "llama3-8b";
  std::string phase = "decode";
  int batch = 0;          // 0: the phase's default
  int64_t kv_len = 0;     // 0: the phase's default
  int page_size = 16;
  std::string dtype = "bf16";
  std::string kv_dtype;   // empty: same as dtype
  LatentFormat latent = LatentFormat::plain;
  int warmup = 3;
  int repeats = 20;
  double max_seconds = 20.0;
  std::string json;
  bool ceilings = false;
  std::string requests;   // "PREFIX+NEW[xCOUNT],...": overrides --batch and --kv-len
  bool non_causal = false;
  bool jit_first_calls = false;
  BackendOptions backend_options;
  std::string decode_timeline;
  ModelEdits edits;
};

// `attnkit bench --jit-first-calls`: one first call of the jit backend into an empty temporary
// disk cache, after which the jit caches restart over that folder (jit_restart_caches); the
// user's cache folder is back, and the temporary one gone, when this is destroyed.
struct FirstCalls {
  FirstCalls(const std::string& name, const harness::Workload& w, harness::BenchOptions opt) {
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    for (int i = 0; dir.empty() || std::filesystem::exists(dir); ++i) {
      dir = base / detail::concat("attnkit-first-calls-", ::getpid(), "-", i);
    }
    std::filesystem::create_directories(dir);
    user_dir = jit_cache_dir();
    jit_restart_caches(dir.string());
    opt.warmup = 0;
    opt.repeats = 1;
    cold_ms = harness::run_bench(name, w, opt).first_call_ms;
    jit_restart_caches(dir.string());
  }
  ~FirstCalls() {
    jit_restart_caches(user_dir);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  FirstCalls(const FirstCalls&) = delete;
  FirstCalls& operator=(const FirstCalls&) = delete;
  std::filesystem::path dir;
  std::string user_dir;
  double cold_ms = 0.0;
};

harness::Phase parse_phase(const std::string& p) {
  return p == "prefill" ? harness::Phase::prefill : p == "decode" ? harness::Phase::decode : harness::Phase::mixed;
}

nlohmann::json to_json(const harness::BenchResult& r) {
  return {{"backend", r.backend},       {"workload", r.workload},         {"skipped", r.skipped},
          {"batch_size", r.batch_size}, {"kv_tokens", r.kv_tokens},
          {"repeats", r.repeats},       {"median_ms", r.median_ms}, {"first_call_ms", r.first_call_ms},       {"min_ms", r.min_ms},
          {"max_ms", r.max_ms},         {"flops", r.flops},               {"bytes", r.bytes},
          {"tokens_per_s", r.tokens_per_s}, {"flop_per_s", r.flop_per_s}, {"bytes_per_s", r.bytes_per_s},
          {"workspace_bytes", r.workspace_bytes}, {"backend_host_bytes", r.backend_host_bytes},
          {"peak_rss_bytes", r.peak_rss_bytes}, {"plan_us", r.plan_us}, {"plan_step_us", r.plan_step_us},
          {"call_host_us", r.call_host_us}};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// The median over a host backend's calls of its read rate over that of the probe pass just before
// the call; 0 when no passes were paired with the calls.
double paired_read_fraction(const harness::BenchResult& r) {
  if (r.paired.size() != r.call_ms.size() || r.paired.empty()) return 0.0;
  std::vector<double> f;
  for (size_t i = 0; i < r.paired.size(); ++i) f.push_back(r.bytes / (r.call_ms[i] * 1e-3) / r.paired[i]);
  return median(f);
}

}  // namespace

std::function<int()> add_bench(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("bench", "Time backends on a workload");
  auto o = std::make_shared<Options>();
  std::vector<std::string> backends = Registry::global().names();
  backends.push_back("all");
  cmd->add_option("--backend", o->backend, "Backend name, or all")->check(CLI::IsMember(backends));
  cmd->add_option("--preset", o->preset, "Model preset (its first layer is timed)")->check(CLI::IsMember(preset_names()));
  cmd->add_option("--phase", o->phase, "prefill, decode or mixed")->check(CLI::IsMember({"prefill", "decode", "mixed"}));
  CLI::Option* batch = cmd->add_option("--batch", o->batch, "Requests in the batch (default: decode 8, prefill 1, mixed 8)")
      ->check(whole_number(1, 1 << 20))
      ->default_str("");
  CLI::Option* kv_len = cmd->add_option("--kv-len", o->kv_len,
                  "Tokens per request after this step (default: decode 4096, prefill 512, mixed 4096)")
      ->check(whole_number(1, int64_t{1} << 24))
      ->default_str("");
  cmd->add_option("--requests", o->requests,
                  "The batch as PREFIX+NEW[xCOUNT],... (e.g. 127+1x32,8191+1x32), instead of --batch and --kv-len")
      ->excludes(batch)
      ->excludes(kv_len)
      ->check(CLI::Validator(
          [](std::string& text) {
            try {
              harness::make_workload(make_preset("llama3-8b"), harness::Phase::decode, text);
            } catch (const Error& e) {
              // CLI11 names the flag itself: the library's own "requests: " prefix goes.
              std::string why = e.what();
              const std::string prefix = "requests: ";
              return why.rfind(prefix, 0) == 0 ? why.substr(prefix.size()) : why;
            }
            return std::string();
          },
          "PREFIX+NEW[xCOUNT],..."));
  cmd->add_flag("--non-causal", o->non_causal, "Every query sees the whole history and all new tokens");
  cmd->add_option("--page-size", o->page_size, "KV page size")->check(whole_number(1, 256));
  cmd->add_option("--dtype", o->dtype, "q/k/v/out dtype")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  add_latent_option(*cmd, &o->latent);
  cmd->add_option("--kv-dtype", o->kv_dtype, "cache dtype (default: --dtype)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "e4m3"}));
  cmd->add_option("--warmup", o->warmup, "Untimed calls first")->check(whole_number(0, 1000));
  cmd->add_option("--repeats", o->repeats, "Timed calls (the median is reported)")->check(whole_number(1, 100000));
  cmd->add_option("--max-seconds", o->max_seconds, "Seconds after which a slow backend stops repeating")
      ->check(positive_number());
  cmd->add_option("--json", o->json, "Also write the results as JSON to this file")->check(writable_file());
  add_backend_options(*cmd, &o->backend_options);
  add_cpu_target_option(*cmd);
  cmd->add_option("--decode-timeline", o->decode_timeline,
                  "planned: write the last timed decode's per-CTA timeline to this CSV file (scripts/decode-timeline.py)")
      ->check(writable_file());
  cmd->add_flag("--ceilings", o->ceilings, "Measure this machine's read bandwidth and matrix/FMA rate, and report fractions");
  cmd->add_flag("--jit-first-calls", o->jit_first_calls,
                "jit: time its first call cold (compile and tune into an empty disk cache) and from that disk cache "
                "(as a new process would find it), beside the steady state");
  add_model_options(*cmd, &o->edits);
  add_threads_option(*cmd);
  return [o] {
    const ModelSpec model = with_edits(make_preset(o->preset), o->edits);
    const harness::Phase phase = parse_phase(o->phase);
    const int batch = o->batch ? o->batch : (phase == harness::Phase::prefill ? 1 : 8);
    const int64_t kv_len = o->kv_len ? o->kv_len : (phase == harness::Phase::prefill ? 512 : 4096);
    harness::Workload w =
        o->requests.empty()
            ? harness::make_workload(model, phase, batch, kv_len, o->page_size, parse_dtype(o->dtype))
            : harness::make_workload(model, phase, o->requests, o->page_size, parse_dtype(o->dtype));
    if (o->non_causal) {
      w.model.layers[0].causal = false;
      w.label += " full";
    }
    if (!o->kv_dtype.empty()) w.kv_dtype = parse_dtype(o->kv_dtype);
    w.latent_format = o->latent;
    if (o->latent == LatentFormat::fp8_blocked) {
      w.label += " fp8-blocked";
    }
    w.label = model.name + " " + w.label;
    harness::BenchOptions opt;
    opt.warmup = o->warmup;
    opt.repeats = o->repeats;
    opt.max_seconds = o->max_seconds;
    opt.backend_options = o->backend_options;
    opt.decode_timeline = o->decode_timeline;

    std::vector<std::string> names;
    if (o->backend == "all") {
      names = Registry::global().names();
    } else {
      require_available("bench", o->backend);
      names.push_back(o->backend);
    }
    const Ceilings ceilings = o->ceilings ? measure_ceilings() : Ceilings{};
    if (o->ceilings) print_ceilings(ceilings);

    const bool memory_bound = phase == harness::Phase::decode;
    // A memory-bound host backend is compared with the read bandwidth of the moment: a probe pass
    // runs before each of its timed calls (the bandwidth a shared host gives two cores moved from
    // 30 to 57 GB/s between seconds here), and "of ceiling" is the median of the calls' ratios.
    std::unique_ptr<harness::ReadProbe> probe;
    const bool host_backend = std::any_of(names.begin(), names.end(), [](const std::string& n) {
      return Registry::global().get(n).device == Device::cpu;
    });
    if (host_backend) std::cout << "cpu target: " << cpu_target() << "\n";
    if (o->ceilings && memory_bound && host_backend) probe = std::make_unique<harness::ReadProbe>();
    std::vector<std::vector<std::string>> rows = {{"backend", "workload", "median ms", "first ms", "calls", "tokens/s",
                                                   memory_bound ? "bytes/s" : "FLOP/s", "of ceiling",
                                                   "read beside", "plan us", "call us", "workspace", "host +", "peak RSS"}};
    nlohmann::json results = nlohmann::json::array();
    std::vector<std::string> notes;  // why a backend was skipped, under the table
    for (const std::string& name : names) {
      const Device device = Registry::global().get(name).device;
      harness::BenchOptions run_opt = opt;
      if (probe && device == Device::cpu) run_opt.before_each_call = [&probe] { return probe->pass(); };
      // A line a backend as it starts (stderr): the table comes when every backend is timed.
      std::fprintf(stderr, "bench: %s on %s ...\n", name.c_str(), w.label.c_str());
      // jit: the first call cold, into an empty disk cache (compile and tune); the run below then
      // starts as a new process over that cache would (a disk load, the stored tile choice).
      std::optional<FirstCalls> first_calls;
      if (o->jit_first_calls && name == "jit" && Registry::global().get(name).why_unavailable().empty()) {
        first_calls.emplace(name, w, run_opt);
      }
      const harness::BenchResult r = harness::run_bench(name, w, run_opt);
      nlohmann::json j = to_json(r);
      if (first_calls && r.skipped.empty()) {
        j["first_call_cold_ms"] = first_calls->cold_ms;
        j["first_call_disk_ms"] = r.first_call_ms;
        notes.push_back(detail::concat("jit first calls: cold ", fixed(first_calls->cold_ms, 1),
                                       " ms (compile and tune into an empty disk cache), from that disk cache ",
                                       fixed(r.first_call_ms, 1), " ms, then ", fixed(r.median_ms, 3), " ms a call"));
      }
      if (device == Device::cpu) j["cpu_target"] = cpu_target();
      if (!r.skipped.empty()) {
        rows.push_back({name, w.label, "skipped"});
        notes.push_back(name + ": skipped: " + r.skipped);
        results.push_back(j);
        continue;
      }
      const double rate = memory_bound ? r.bytes_per_s : r.flop_per_s;
      const double ceiling = ceiling_for(ceilings, device, memory_bound);
      const double paired = paired_read_fraction(r);
      const double fraction = paired > 0 ? paired : ceiling > 0 ? rate / ceiling : 0.0;
      const std::string frac = fraction > 0 ? fixed(100.0 * fraction, 1) + "%" : "-";
      if (fraction > 0) j["fraction_of_ceiling"] = fraction;
      if (paired > 0) {
        j["fraction_of_probe_before_run"] = rate / ceiling;
        j["read_beside_bytes_per_s"] = median(r.paired);
        j["call_ms"] = r.call_ms;
        j["read_before_call_bytes_per_s"] = r.paired;
      }
      const std::string beside = paired > 0 ? si(median(r.paired), "B/s") : "-";
      rows.push_back({name, w.label, fixed(r.median_ms, 3), fixed(r.first_call_ms, 1), std::to_string(r.repeats), si(r.tokens_per_s),
                      si(rate, memory_bound ? "B/s" : "FLOP/s"), frac, beside, fixed(r.plan_us, 1),
                      r.call_host_us > 0 ? fixed(r.call_host_us, 1) : "-", si(r.workspace_bytes, "B"), si(r.backend_host_bytes, "B"), si(r.peak_rss_bytes, "B")});
      results.push_back(j);
    }
    print_table(rows);
    if (!notes.empty()) std::cout << '\n';
    for (const std::string& n : notes) std::cout << n << '\n';
    if (!o->json.empty()) {
      std::ofstream f(o->json);
      if (!f) throw Error("bench: --json file '" + o->json + "' cannot be written");
      nlohmann::json doc = run_info();
      doc.update({{"phase", o->phase}, {"ceilings", ceilings_json(ceilings)}, {"results", results}});
      f << doc.dump(2) << '\n';
    }
    return 0;
  };
}

}  // namespace attnkit::tool
