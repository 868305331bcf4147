// Result files for report tests, shaped like `attnkit replay --json` (tools/attnkit/replay_output.cc,
// src/serving/replay_json.cc) and `attnkit bench --json` (tools/attnkit/bench.cc) write them, with
// made-up numbers: a set of runs differing in backend, trace, preset and commit, as a user compares.
#pragma once

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "serving/report.h"

namespace attnkit::serving::testing {

struct ReplaySpec {
  std::vector<std::string> backends;  // one run each
  std::string trace, preset, commit;
  double speed = 1.0;  // the made-up kernel's slowness
};

inline nlohmann::json synthetic_replay(const ReplaySpec& spec, unsigned seed) {
  using nlohmann::json;
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> noise(0.0, 0.15);
  const int layers = spec.preset == "tiny" ? 2 : 32;
  json runs = json::array();
  for (size_t b = 0; b < spec.backends.size(); ++b) {
    const double slow = spec.speed * (spec.backends[b] == "reference" ? 6.0 : 1.0) * (1.0 + 0.15 * static_cast<double>(b));
    json steps = json::array(), requests = json::array();
    double sum_attn = 0, sum_step = 0;
    for (int i = 0; i < 300; ++i) {
      const bool prefill = i % 7 == 0;
      const double kv = std::round(64.0 * std::pow(1000.0, i / 299.0));  // 64 .. 64k tokens
      const double attn = layers * (0.004 + kv * 1.6e-4 * (prefill ? 4 : 1)) * slow * noise(rng);
      const double sched = 0.02 * noise(rng);
      sum_attn += attn, sum_step += attn + sched;
      steps.push_back({8, prefill ? 512 : 8, prefill ? 7 : 8, prefill ? 1 : 0, kv, kv / 8, attn + sched, attn, 0.0, sched});
    }
    for (int q = 0; q < 60; ++q) {
      const double ttft = 0.002 * slow * std::pow(100.0, q / 59.0) * noise(rng);
      const double tpot = 0.003 * slow * noise(rng);
      requests.push_back({q * 0.01, ttft, tpot, ttft + 20 * tpot, 100 + 40 * q, 1 + q % 30, 0});
    }
    auto pct = [&](double p50) {
      return json{{"p50", p50 * slow}, {"p90", 2 * p50 * slow}, {"p99", 4 * p50 * slow}, {"mean", 1.2 * p50 * slow},
                  {"max", 5 * p50 * slow}};
    };
    runs.push_back({{"label", spec.backends[b]},
                    {"prefill_backend", spec.backends[b]},
                    {"decode_backend", spec.backends[b]},
                    {"device", "cpu"},
                    {"skipped", ""},
                    {"config",
                     {{"model", spec.preset}, {"num_layers", layers}, {"gemms", false}, {"kv_pages", 4096},
                      {"page_size", 16}, {"page_bytes", 16 * layers * 2 * 8 * 128 * 2}, {"kv_capacity_bytes", 1 << 30},
                      {"weight_bytes", spec.preset == "tiny" ? 1 << 20 : 436207616}}},
                    {"summary",
                     {{"requests", 60}, {"output_tokens", 900}, {"prompt_tokens", 20000}, {"steps", 300},
                      {"makespan_s", sum_step / 1e3}, {"wall_s", sum_step / 1e3},
                      {"output_tokens_per_s", 900 / (sum_step / 1e3)}, {"total_tokens_per_s", 20900 / (sum_step / 1e3)},
                      {"ttft_s", pct(0.02)}, {"tpot_s", pct(0.003)}, {"itl_s", pct(0.0028)}, {"e2e_s", pct(0.08)},
                      {"peak_kv_bytes", (200 + 50 * b) << 20}, {"peak_workspace_bytes", b == 0 ? 0 : 3 << 20},
                      {"preemptions", 0}, {"attn_fraction", sum_attn / sum_step}, {"sched_fraction", 0.002},
                      {"sched_us_p50", 20.0}, {"sched_fraction_batch256", 0.0}, {"steps_batch256", 0},
                      {"max_batch_size", 8}}},
                    {"verified", json::array()},
                    {"steps_columns", {"batch_size", "num_tokens", "num_decode", "num_prefill", "kv_tokens",
                                       "max_kv_len", "step_ms", "attn_ms", "gemm_ms", "sched_ms"}},
                    {"steps", steps},
                    {"requests_columns", {"arrival_s", "ttft_s", "tpot_s", "e2e_s", "prompt_len", "output_len",
                                          "preemptions"}},
                    {"requests", requests},
                    {"itl_s", json::array({0.003, 0.004})}});
  }
  return {{"kind", "replay"}, {"version", 1}, {"device_name", "Intel Xeon (2 cores)"}, {"date", "2026-11-30"},
          {"commit", spec.commit},
          {"trace", {{"name", spec.trace}, {"format", "jsonl"}, {"has_arrivals", true}, {"rows", 64},
                     {"dropped", 0}, {"clamped", 4}, {"requests", 60}, {"prefix_hit_ratio", 0.0}}},
          {"options", {{"preset", spec.preset}, {"layers", layers}, {"page_size", 16}, {"dtype", "bf16"},
                       {"kv_dtype", "bf16"}, {"max_batch", 64}, {"token_budget", 2048}, {"speed", 1.0},
                       {"gemms", false}, {"verify", false}}},
          {"runs", runs}};
}

// A bench file: `phase` with each backend on each "B x L" shape, fractions only with ceilings.
inline nlohmann::json synthetic_bench(const std::string& phase, const std::vector<std::string>& backends,
                                      const std::vector<std::pair<int, int>>& shapes, bool ceilings) {
  using nlohmann::json;
  json results = json::array();
  for (const std::string& b : backends) {
    for (const auto& [batch, len] : shapes) {
      const double kv = static_cast<double>(batch) * len, slow = b == "reference" ? 40.0 : 1.0;
      const double ms = (0.01 + kv * (phase == "decode" ? 1.5e-4 : 1e-3)) * slow;
      json r = {{"backend", b}, {"workload", "llama3-8b " + phase + " " + std::to_string(batch) + " x " + std::to_string(len)},
                {"skipped", ""}, {"batch_size", batch}, {"kv_tokens", kv}, {"repeats", 20}, {"median_ms", ms},
                {"min_ms", ms * 0.9}, {"max_ms", ms * 1.2}, {"flops", kv * 4096.0}, {"bytes", kv * 2048.0},
                {"tokens_per_s", batch / (ms * 1e-3)}, {"flop_per_s", kv * 4096.0 / (ms * 1e-3)},
                {"bytes_per_s", kv * 2048.0 / (ms * 1e-3)}, {"workspace_bytes", b == "cpu" ? 0 : 1 << 20},
                {"backend_host_bytes", 0}, {"peak_rss_bytes", 200 << 20}, {"plan_us", 3.0}, {"plan_step_us", 1.0}};
      if (ceilings) r["fraction_of_ceiling"] = std::min(0.95, 0.6 / slow);
      results.push_back(r);
    }
  }
  return {{"phase", phase},
          {"ceilings", {{"cpu_read_bytes_per_s", ceilings ? 4e10 : 0.0}, {"cpu_fma_flop_per_s", ceilings ? 1e11 : 0.0},
                        {"gpu_read_bytes_per_s", 0.0}, {"gpu_matrix_flop_per_s", 0.0}}},
          {"results", results}};
}

// Result files holding `runs` runs (1, 5 or 20): replays first, then bench files.
inline std::vector<ReportInput> synthetic_inputs(int runs) {
  std::vector<ReportInput> all;
  int count = 0;
  auto replay = [&](const ReplaySpec& s) {
    all.push_back({"replay-" + std::to_string(all.size()) + ".json", synthetic_replay(s, static_cast<unsigned>(all.size()))});
    count += static_cast<int>(s.backends.size());
  };
  auto bench = [&](const std::string& phase, const std::vector<std::string>& b,
                   const std::vector<std::pair<int, int>>& shapes, bool ceilings) {
    all.push_back({"bench-" + std::to_string(all.size()) + ".json", synthetic_bench(phase, b, shapes, ceilings)});
    count += static_cast<int>(b.size());
  };
  replay({{"cpu"}, "sharegpt-sample", "llama3-8b", "1a2b3c4", 1.0});
  if (count >= runs) return all;
  replay({{"reference"}, "sharegpt-sample", "llama3-8b", "1a2b3c4", 1.0});
  replay({{"cpu"}, "long-context", "llama3-8b", "1a2b3c4", 1.0});
  bench("decode", {"cpu", "reference"}, {{1, 1024}, {8, 4096}, {32, 8192}}, true);
  if (count >= runs) return all;
  const char* backends[3] = {"cpu", "reference", "cpu+reference"};
  const char* traces[2] = {"sharegpt-sample", "long-context"};
  for (int i = 0; i < 9; ++i) {
    replay({{backends[i % 3]}, traces[(i / 3) % 2], "llama3-8b", i < 5 ? "5e6f708" : "9a8b7c6", 1.0 + 0.2 * i});
  }
  replay({{"cpu", "reference"}, "sharegpt-sample", "tiny", "9a8b7c6", 0.3});
  replay({{"cpu", "reference"}, "sharegpt-sample", "tiny", "d1e2f3a", 0.25});
  bench("prefill", {"cpu"}, {{1, 512}, {1, 2048}}, false);
  bench("decode", {"cpu"}, {{4, 2048}}, true);
  return all;
}

}  // namespace attnkit::serving::testing
