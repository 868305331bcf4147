// `attnkit tune`: time every available backend on shape buckets and write the selection table
// that `auto` reads (attnkit/tuning.h).
#include <algorithm>
#include <iostream>
#include <sstream>

#include "attnkit/registry.h"
#include "attnkit/tuning.h"
#include "commands.h"
#include "format.h"
#include "harness/bench.h"

namespace attnkit::tool {

namespace {

template <typename T>
std::vector<T> parse_list(const std::string& text, const char* flag) {
  std::vector<T> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    T v{};
    std::stringstream is(item);
    if (!(is >> v) || v <= 0) throw Error(std::string("tune: ") + flag + " must be a comma-separated list of positive numbers, got '" + text + "'");
    out.push_back(v);
  }
  return out;
}

}  // namespace

std::function<int()> add_tune(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("tune", "Time the backends on shape buckets and write the table `auto` uses");
  struct Options {
    std::string preset = "llama3-8b";
    std::string phases = "prefill,decode";
    std::string batches = "1,8";
    std::string kv_lens = "256,2048";
    std::string out = "attnkit-tune.json";
    std::vector<std::string> backends;  // empty: every available backend
    int repeats = 10;
    double max_seconds = 5.0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--preset", o->preset, "Model preset")->check(CLI::IsMember(preset_names()));
  cmd->add_option("--backend", o->backends, "Backends to time, comma-separated (default: every available one)")
      ->delimiter(',')
      ->check(CLI::IsMember(Registry::global().names()));
  cmd->add_option("--phases", o->phases, "Comma-separated phases: prefill, decode");
  cmd->add_option("--batches", o->batches, "Comma-separated batch sizes");
  cmd->add_option("--kv-lens", o->kv_lens, "Comma-separated KV lengths (prefill: tokens per request)");
  cmd->add_option("--out", o->out, "Where to write the table (use it with ATTNKIT_TUNE_TABLE=FILE)");
  cmd->add_option("--repeats", o->repeats, "Timed calls per backend and bucket")->check(CLI::Range(1, 10000));
  cmd->add_option("--max-seconds", o->max_seconds, "Stop repeating a slow backend after this long")
      ->check(CLI::PositiveNumber);
  return [o] {
    const ModelSpec model = make_preset(o->preset);
    std::vector<std::string> phases;
    {
      std::stringstream ss(o->phases);
      std::string p;
      while (std::getline(ss, p, ',')) {
        if (p != "prefill" && p != "decode") throw Error("tune: --phases must list prefill and/or decode, got '" + p + "'");
        phases.push_back(p);
      }
    }
    const auto batches = parse_list<int>(o->batches, "--batches");
    const auto kv_lens = parse_list<int64_t>(o->kv_lens, "--kv-lens");
    harness::BenchOptions opt;
    opt.repeats = o->repeats;
    opt.max_seconds = o->max_seconds;
    TuningTable table;
    std::vector<std::vector<std::string>> rows = {{"device", "phase", "batch", "kv_len", "fastest", "median ms", "others"}};
    for (Device device : {Device::cpu, Device::cuda}) {
      std::vector<std::string> names;
      for (const auto& b : Registry::global().all()) {
        const bool available = !b.why_unavailable || b.why_unavailable().empty();
        const bool chosen = o->backends.empty() ||
                            std::find(o->backends.begin(), o->backends.end(), b.name) != o->backends.end();
        if (b.device == device && available && chosen) names.push_back(b.name);
      }
      if (names.empty()) continue;
      for (const auto& phase : phases) {
        for (int batch : batches) {
          for (int64_t kv : kv_lens) {
            const harness::Phase ph = phase == "prefill" ? harness::Phase::prefill : harness::Phase::decode;
            const harness::Workload w = harness::make_workload(model, ph, batch, kv);
            TuningEntry e;
            e.bucket.device = std::string(device_name(device));
            e.bucket.phase = phase;
            e.bucket.heads = heads_key(model.layer(0));
            e.bucket.batch_size = static_cast<int>(round_up_pow2(batch));
            e.bucket.kv_len = round_up_pow2(kv);
            std::string others;
            for (const auto& name : names) {
              const harness::BenchResult r = harness::run_bench(name, w, opt);
              if (!r.skipped.empty()) continue;
              e.median_ms[name] = r.median_ms;
              if (e.backend.empty() || r.median_ms < e.median_ms[e.backend]) e.backend = name;
            }
            if (e.backend.empty()) continue;
            for (const auto& [name, ms] : e.median_ms) {
              if (name != e.backend) others += (others.empty() ? "" : ", ") + name + " " + fixed(ms, 3);
            }
            rows.push_back({e.bucket.device, phase, std::to_string(batch), std::to_string(kv), e.backend,
                            fixed(e.median_ms[e.backend], 3), others});
            table.add(std::move(e));
          }
        }
      }
    }
    print_table(rows);
    table.save(o->out);
    std::cout << "wrote " << table.entries().size() << " buckets to " << o->out << "; `auto` reads it with ATTNKIT_TUNE_TABLE="
              << o->out << '\n';
    return 0;
  };
}

}  // namespace attnkit::tool
