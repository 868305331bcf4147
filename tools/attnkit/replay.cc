// `attnkit replay`: replays a request trace through each chosen backend (and a prefill/decode pair),
// prints the comparison table, and writes the results JSON and the HTML report. The work itself
// is src/serving (scheduler, step loop, verification); the table and JSON layout: replay_output.cc.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "attnkit/registry.h"
#include "commands.h"
#include "options.h"
#include "replay_output.h"
#include "serving/replay.h"
#include "serving/report.h"

namespace attnkit::tool {

namespace {

struct Options {
  std::string trace = "builtin";
  std::string backend;            // empty: auto, unless a pair was given
  std::string prefill_backend, decode_backend;
  std::string preset = "llama3-8b";
  int layers = 0;
  int64_t max_requests = -1;  // -1: the default (all, or kCpuDefaultRequests)
  int64_t max_context = 16384;
  int64_t min_context = 0;
  double speed = 1.0;
  double rate = 4.0;
  int page_size = 16;
  std::string dtype = "bf16";
  std::string kv_dtype;
  LatentFormat latent = LatentFormat::plain;
  double kv_memory_gib = 0.0;
  int64_t kv_pages = 0;
  int max_batch = 256;
  int64_t token_budget = 8192;
  bool attention_only = false;
  bool verify = false;
  int verify_every = 64;
  int verify_max = 8;
  uint64_t seed = 1;
  std::string json;
  std::string report;
  bool no_progress = false;
  int cp = 1;
  std::string cp_share = "interleaved";
  int cp_pages_per_run = 16;
};

// What a replay runs where no GPU backend takes part and --layers / --max-requests are not given:
// every layer of llama3-8b on the CPU takes 14 minutes for 50 requests of the built-in trace (1000
// requests); one layer and 50 requests take well under a minute.
constexpr int kCpuDefaultLayers = 1;
constexpr int64_t kCpuDefaultRequests = 50;

// Progress on stderr: a bar redrawn in place on a terminal; into a file or a pipe, a line at the
// start and then one every 10 s.
class Progress {
 public:
  Progress(std::string label, bool enabled) : label_(std::move(label)), tty_(isatty(2)), enabled_(enabled) {}
  void update(int64_t finished, int64_t total, int64_t steps, double clock_s) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (drawn_ && now - last_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::seconds(10)) && finished < total)
      return;
    if (!drawn_) start_ = now;
    last_ = now;
    drawn_ = true;
    const double wall = std::chrono::duration<double>(now - start_).count();
    if (!tty_) {
      std::fprintf(stderr, "%s: %lld/%lld requests finished, step %lld, clock %.1f s, wall %.0f s\n", label_.c_str(),
                   static_cast<long long>(finished), static_cast<long long>(total), static_cast<long long>(steps),
                   clock_s, wall);
      return;
    }
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * finished / total) : kWidth;
    std::fprintf(stderr, "\r%-14s [%s%s] %lld/%lld requests, step %lld, clock %.1f s", label_.c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(kWidth - filled), '.').c_str(), static_cast<long long>(finished),
                 static_cast<long long>(total), static_cast<long long>(steps), clock_s);
  }
  ~Progress() {
    if (drawn_ && tty_) std::fprintf(stderr, "\r%*s\r", 100, "");
  }

 private:
  std::string label_;
  bool tty_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_{}, last_{};
};

std::vector<std::string> backend_list(const Options& o) {
  std::string spec = o.backend;
  if (spec.empty()) spec = (o.prefill_backend.empty() ? "auto" : "");
  std::vector<std::string> names;
  if (spec == "all") return Registry::global().names();
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    names.push_back(name);
  }
  return names;
}

}  // namespace

std::function<int()> add_replay(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("replay", "Replay a request trace through backends (continuous batching)");
  auto o = std::make_shared<Options>();
  cmd->add_option("--trace", o->trace,
                  "Trace file (Azure 2023 / BurstGPT / ShareGPT-arXiv stats CSV, Mooncake JSONL), or builtin (a "
                  "sample of the Azure 2023 conversation trace)")
      ->check(trace_path());
  std::vector<std::string> known = Registry::global().names();
  known.push_back("auto");
  // Each comma-separated name must be a backend (or auto), or the whole value "all".
  const CLI::Validator backend_names(
      [known](std::string& value) -> std::string {
        if (value == "all") return {};
        std::stringstream ss(value);
        std::string name;
        while (std::getline(ss, name, ',')) {
          if (std::find(known.begin(), known.end(), name) == known.end()) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ",") + k;
            return name + " not in {" + list + ",all}";
          }
        }
        return {};
      },
      "NAME[,NAME...]|all");
  const CLI::Validator one_backend = CLI::IsMember(Registry::global().names());
  cmd->add_option("--backend", o->backend, "Backend names, comma-separated, or all (default: auto)")
      ->check(backend_names);
  CLI::Option* prefill =
      cmd->add_option("--prefill-backend", o->prefill_backend, "Hybrid pair: backend for extend and mixed steps")
          ->check(one_backend);
  CLI::Option* decode = cmd->add_option("--decode-backend", o->decode_backend, "Hybrid pair: backend for decode steps")
                            ->check(one_backend);
  prefill->needs(decode);
  decode->needs(prefill);
  cmd->add_option("--preset", o->preset, "Model preset")->check(CLI::IsMember(preset_names()));
  cmd->add_option("--layers", o->layers,
                  "Layers to run (default: all of the preset's where a GPU backend runs; " +
                      std::to_string(kCpuDefaultLayers) + " where only CPU backends run, so that it takes seconds)")
      ->check(whole_number(1, 1000))
      ->default_str("");
  cmd->add_option("--max-requests", o->max_requests,
                  "Replay only the first N requests (0: all; default: all where a GPU backend runs, " +
                      std::to_string(kCpuDefaultRequests) + " where only CPU backends run)")
      ->check(whole_number(0, int64_t{1} << 40))
      ->default_str("");
  cmd->add_option("--max-context", o->max_context, "Clamp prompt + output to this many tokens (0: no limit)")
      ->check(whole_number(2, int64_t{1} << 30, /*or_zero=*/true));
  cmd->add_option("--min-context", o->min_context,
                  "Replay only requests of at least this many tokens, prompt + output (long-context runs)")
      ->check(whole_number(0, int64_t{1} << 30));
  cmd->add_option("--speed", o->speed, "Time scale of arrivals (2: twice as fast)")->check(positive_number());
  cmd->add_option("--rate", o->rate, "Requests/s of Poisson arrivals for traces without times")
      ->check(positive_number());
  cmd->add_option("--page-size", o->page_size, "KV page size")->check(whole_number(1, 256));
  cmd->add_option("--dtype", o->dtype, "q/k/v/out dtype")->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--kv-dtype", o->kv_dtype, "cache dtype (default: --dtype)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "e4m3"}));
  add_latent_option(*cmd, &o->latent);
  CLI::Option* kv_memory =
      cmd->add_option("--kv-memory", o->kv_memory_gib, "KV cache size in GiB (default: 24 on a GPU, 1 on the CPU)")
      ->check(positive_number())
      ->default_str("");
  cmd->add_option("--kv-pages", o->kv_pages, "KV cache size in pages, instead of --kv-memory")
      ->excludes(kv_memory)
      ->check(whole_number(2, int64_t{1} << 31))
      ->default_str("");
  cmd->add_option("--max-batch", o->max_batch, "Requests running at once")->check(whole_number(1, 1 << 16));
  cmd->add_option("--token-budget", o->token_budget, "New tokens a step (decodes + prefill chunks)")
      ->check(whole_number(1, int64_t{1} << 20));
  cmd->add_flag("--attention-only", o->attention_only, "Skip the layers' matrix products (always so on the CPU)");
  CLI::Option* verify =
      cmd->add_flag("--verify", o->verify, "Compare sampled steps with reference; a mismatch fails the run");
  cmd->add_option("--verify-every", o->verify_every, "Check every N-th step (and the first of each mode)")
      ->needs(verify)
      ->check(whole_number(1, 1 << 30));
  cmd->add_option("--verify-max", o->verify_max, "At most this many checked steps a run")
      ->needs(verify)
      ->check(whole_number(1, 1 << 20));
  cmd->add_option("--seed", o->seed, "Seed of the inputs and of drawn arrivals")->check(unsigned_integer());
  cmd->add_option("--json", o->json, "Write the results as JSON to this file")->check(writable_file());
  cmd->add_option("--report", o->report, "Also write the HTML report to this file")->check(writable_file());
  cmd->add_flag("--no-progress", o->no_progress,
                "No progress on stderr (else a bar on a terminal, a line every 10 s into a file or pipe)");
  cmd->add_option("--cp", o->cp,
                  "Context parallelism: ranks, each with its own cache (--kv-memory a rank) holding a share of "
                  "every request's pages, run one after another in this process on the backend's device; prompts "
                  "run whole")
      ->check(whole_number(1, 64));
  cmd->add_option("--cp-share", o->cp_share, "How --cp shares a request's pages: interleaved or contiguous runs")
      ->check(CLI::IsMember({"interleaved", "contiguous"}));
  cmd->add_option("--cp-pages-per-run", o->cp_pages_per_run, "Pages a run of --cp-share contiguous")
      ->check(whole_number(1, 1 << 20));
  add_threads_option(*cmd);
  return [o] {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const std::string& name : backend_list(*o)) pairs.emplace_back(name, "");
    if (!o->prefill_backend.empty()) pairs.emplace_back(o->prefill_backend, o->decode_backend);
    // Named backends must run here (`all` passes over those that cannot); does any run on a GPU?
    bool gpu = false;
    for (const auto& [first, second] : pairs) {
      for (const std::string& name : {first, second}) {
        if (name.empty()) continue;
        if (name == "auto") {
          gpu = gpu || cuda_available();
          continue;
        }
        if (o->backend != "all") require_available("replay", name);
        const BackendInfo& info = Registry::global().get(name);
        gpu = gpu || (info.device == Device::cuda && (!info.why_unavailable || info.why_unavailable().empty()));
      }
    }
    serving::TraceOptions topt;
    topt.max_requests = o->max_requests >= 0 ? o->max_requests : gpu ? 0 : kCpuDefaultRequests;
    topt.max_context = o->max_context;
    topt.min_context = o->min_context;
    topt.speed = o->speed;
    topt.rate = o->rate;
    topt.seed = o->seed;
    const serving::Trace trace = serving::load_trace(o->trace, topt);
    ATTNKIT_CHECK(!trace.requests.empty(), "replay: the trace ", trace.name, " has no request to replay");

    serving::ReplayOptions ropt;
    const int layers = o->layers > 0 ? o->layers : gpu ? -1 : kCpuDefaultLayers;
    ropt.model = make_preset(o->preset, layers);
    ropt.page_size = o->page_size;
    ropt.dtype = parse_dtype(o->dtype, "--dtype");
    ropt.kv_dtype = o->kv_dtype.empty() ? ropt.dtype : parse_dtype(o->kv_dtype, "--kv-dtype");
    ropt.latent_format = o->latent;
    ropt.kv_memory_bytes = o->kv_memory_gib * double(1ull << 30);
    ropt.kv_pages = o->kv_pages;
    ropt.scheduler.max_batch_size = o->max_batch;
    ropt.scheduler.token_budget = std::max<int64_t>(o->token_budget, o->max_batch);
    ropt.gemms = !o->attention_only;
    ropt.verify = o->verify;
    ropt.verify_every = o->verify_every;
    ropt.verify_max = o->verify_max;
    ropt.seed = o->seed;
    ropt.cp_ranks = o->cp;
    ropt.cp_share = o->cp_share == "contiguous" ? ShareKind::contiguous : ShareKind::interleaved;
    ropt.cp_pages_per_run = o->cp_pages_per_run;
    if (o->cp > 1) {
      // Prompts run whole: the budget must hold the longest request.
      int64_t longest = 0;
      for (const serving::TraceRequest& r : trace.requests) longest = std::max(longest, r.prompt_len + r.output_len);
      ropt.scheduler.token_budget = std::max(ropt.scheduler.token_budget, longest);
    }
    print_trace_line(trace, ropt);
    if (!gpu && (o->layers == 0 || o->max_requests < 0)) {
      std::cout << "only CPU backends run, so by default:";
      if (o->layers == 0) {
        std::cout << " " << kCpuDefaultLayers << " of " << make_preset(o->preset).num_layers() << " layers";
      }
      if (o->max_requests < 0) {
        std::cout << (o->layers == 0 ? "," : "") << " the first " << kCpuDefaultRequests << " requests";
      }
      std::cout << " (--layers, --max-requests for more)\n";
    }

    std::vector<RunOutcome> runs;
    const bool show = !o->no_progress;
    for (const auto& [first, second] : pairs) {
      serving::ReplayOptions ro = ropt;
      if (second.empty()) ro.backend = first;
      else {
        ro.prefill_backend = first;
        ro.decode_backend = second;
      }
      Progress bar(second.empty() ? first : first + "+" + second, show);
      ro.on_step = [&bar](int64_t f, int64_t t, int64_t s, double c) { bar.update(f, t, s, c); };
      RunOutcome out;
      try {
        out.result = serving::run_replay(trace, ro, &out.result);
      } catch (const Error& e) {
        out.error = e.what();
        if (out.result.label.empty()) out.result.label = second.empty() ? first : first + "+" + second;
      }
      runs.push_back(std::move(out));
    }
    print_comparison(runs);
    const nlohmann::json doc = results_json(trace, o->preset, ropt, o->speed, runs);
    if (!o->json.empty()) {
      std::ofstream f(o->json);
      ATTNKIT_CHECK(f.good(), "replay: --json file '", o->json, "' cannot be written");
      f << doc.dump() << '\n';
    }
    if (!o->report.empty()) {
      const std::string html = serving::build_report({{o->json.empty() ? "replay" : o->json, doc}}, "attnkit replay");
      std::ofstream f(o->report);
      ATTNKIT_CHECK(f.good(), "replay: --report file '", o->report, "' cannot be written");
      f << html;
      std::cout << "report: " << o->report << '\n';
    }
    for (const RunOutcome& r : runs) {
      if (!r.error.empty()) return 1;
    }
    return 0;
  };
}

}  // namespace attnkit::tool
