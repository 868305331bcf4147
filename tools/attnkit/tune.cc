// `attnkit tune`: time every available backend on shape buckets and write the selection table
// that `auto` reads (attnkit/tuning.h).
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "attnkit/registry.h"
#include "attnkit/tuning.h"
#include "commands.h"
#include "format.h"
#include "harness/bench.h"
#include "options.h"

namespace attnkit::tool {

std::function<int()> add_tune(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("tune", "Time the backends on shape buckets and write the table `auto` uses");
  struct Options {
    std::string preset = "llama3-8b";
    std::vector<std::string> phases = {"prefill", "decode"};
    std::vector<int> batches = {1, 8};
    std::vector<int64_t> kv_lens = {256, 2048};
    std::string out = "attnkit-tune.json";
    std::vector<std::string> backends;  // empty: every available backend
    int repeats = 10;
    double max_seconds = 5.0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--preset", o->preset, "Model preset")->check(CLI::IsMember(preset_names()));
  cmd->add_option("--backend", o->backends,
                  "Backends to time, comma-separated (default: every available one but reference, the fp64 ground "
                  "truth, which is never the fastest)")
      ->delimiter(',')
      ->check(CLI::IsMember(Registry::global().names()))
      ->default_str("");
  cmd->add_option("--phases", o->phases, "Phases, comma-separated: prefill, decode")
      ->delimiter(',')
      ->check(CLI::IsMember({"prefill", "decode"}));
  cmd->add_option("--batches", o->batches, "Batch sizes, comma-separated")->delimiter(',')->check(whole_number(1, 1 << 16));
  cmd->add_option("--kv-lens", o->kv_lens, "KV lengths, comma-separated (prefill: tokens per request)")
      ->delimiter(',')
      ->check(whole_number(1, int64_t{1} << 24));
  cmd->add_option("--out", o->out, "Where to write the table (use it with ATTNKIT_TUNE_TABLE=FILE)")
      ->check(writable_file());
  cmd->add_option("--repeats", o->repeats, "Timed calls per backend and bucket")->check(whole_number(1, 10000));
  cmd->add_option("--max-seconds", o->max_seconds, "Seconds after which a slow backend stops repeating")
      ->check(positive_number());
  add_threads_option(*cmd);
  return [o] {
    const ModelSpec model = make_preset(o->preset);
    const auto& phases = o->phases;
    const auto& batches = o->batches;
    const auto& kv_lens = o->kv_lens;
    // A backend named on its own must run.
    for (const std::string& name : o->backends) require_available("tune", name);
    harness::BenchOptions opt;
    opt.repeats = o->repeats;
    opt.max_seconds = o->max_seconds;
    TuningTable table;
    std::vector<std::vector<std::string>> rows = {{"device", "phase", "batch", "kv_len", "fastest", "median ms", "others"}};
    for (Device device : {Device::cpu, Device::cuda}) {
      std::vector<std::string> names;
      for (const auto& b : Registry::global().all()) {
        const bool available = !b.why_unavailable || b.why_unavailable().empty();
        const bool chosen = o->backends.empty()
                                ? b.name != "reference"
                                : std::find(o->backends.begin(), o->backends.end(), b.name) != o->backends.end();
        if (b.device == device && available && chosen) names.push_back(b.name);
      }
      if (names.empty()) continue;
      for (const auto& phase : phases) {
        for (int batch : batches) {
          for (int64_t kv : kv_lens) {
            const harness::Phase ph = phase == "prefill" ? harness::Phase::prefill : harness::Phase::decode;
            const harness::Workload w = harness::make_workload(model, ph, batch, kv);
            // A line a bucket as it starts (stderr): the table comes when every bucket is timed.
            std::fprintf(stderr, "tune: %s %s batch %d kv_len %lld ...\n", std::string(device_name(device)).c_str(),
                         phase.c_str(), batch, static_cast<long long>(kv));
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
                            fixed(e.median_ms[e.backend], 3), others.empty() ? "-" : others});
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
