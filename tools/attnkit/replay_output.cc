// The replay's printed table and results JSON (kind "replay"), one row / one object a run.
#include "replay_output.h"

#include <ctime>
#include <iostream>

#include "attnkit/tensor.h"
#include "format.h"
#include "options.h"
#include "run_info.h"
#include "serving/replay_json.h"

namespace attnkit::tool {

namespace {

std::string ms3(const serving::Percentiles& p) {
  return fixed(p.p50 * 1e3, 1) + "/" + fixed(p.p90 * 1e3, 1) + "/" + fixed(p.p99 * 1e3, 1);
}

}  // namespace

void print_trace_line(const serving::Trace& t, const serving::ReplayOptions& o) {
  std::cout << "trace " << t.name << " (" << t.format << "): " << t.requests.size() << " requests of " << t.rows
            << " rows, " << t.dropped << " dropped (empty), " << t.clamped << " clamped";
  if (t.shorter > 0) std::cout << ", " << t.shorter << " shorter than --min-context left out";
  if (!t.has_arrivals) std::cout << ", Poisson arrivals";
  if (t.prefix_hit_ratio > 0) std::cout << ", shared-prefix tokens " << fixed(100 * t.prefix_hit_ratio, 1) << "%";
  std::cout << "\nmodel " << o.model.name << " x " << count_of(o.model.num_layers(), "layer") << ", page " << o.page_size
            << ", max batch " << o.scheduler.max_batch_size << ", token budget " << o.scheduler.token_budget
            << (o.verify ? ", verifying sampled steps against reference" : "") << "\n";
  if (o.cp_ranks > 1) {
    std::cout << "context parallel: " << o.cp_ranks << " ranks in this process, one after another, each with its own "
              << "cache holding a " << (o.cp_share == ShareKind::interleaved ? "page-interleaved" : "contiguous")
              << " share of every request; prompts run whole\n";
  }
}

void print_comparison(const std::vector<RunOutcome>& runs) {
  std::vector<std::vector<std::string>> rows = {{"backend", "device", "out tok/s", "TTFT ms p50/90/99",
                                                 "TPOT ms p50/90/99", "ITL ms p99", "peak KV", "workspace", "preempt",
                                                 "attn share", "sched", "verified"}};
  std::vector<std::string> notes;
  for (const RunOutcome& run : runs) {
    const serving::ReplayResult& r = run.result;
    if (!run.error.empty()) {
      rows.push_back({r.label, r.device, "FAILED"});
      notes.push_back(r.label + ": " + run.error);
      continue;
    }
    if (!r.skipped.empty()) {
      rows.push_back({r.label, r.device.empty() ? "-" : r.device, "skip"});
      notes.push_back(r.label + ": skipped: " + r.skipped);
      continue;
    }
    const serving::Summary& s = r.summary;
    size_t passed = 0;
    for (const auto& v : r.verified) passed += v.passed;
    rows.push_back({r.label, r.device, fixed(s.output_tokens_per_s, 1), ms3(s.ttft_s), ms3(s.tpot_s),
                    fixed(s.itl_s.p99 * 1e3, 1), si(s.peak_kv_bytes, "B"), si(s.peak_workspace_bytes, "B"),
                    std::to_string(r.num_preemptions), fixed(100 * s.attn_fraction, 1) + "%",
                    fixed(100 * s.sched_fraction, 2) + "%",
                    r.verified.empty() ? "-" : std::to_string(passed) + "/" + std::to_string(r.verified.size())});
    std::string line = r.label + ": " + std::to_string(s.num_requests) + " requests finished, " +
                       std::to_string(s.output_tokens) + " output tokens in " + std::to_string(s.num_steps) +
                       " steps, clock " + fixed(s.makespan_s, 2) + " s (wall " + fixed(r.wall_s, 1) +
                       " s), no KV page leaked; scheduler + plan p50 " + fixed(s.sched_us_p50, 1) + " us/step = " +
                       fixed(100 * s.sched_fraction, 2) + "% of step time";
    if (s.large_steps > 0) {
      line += ", at batch >= " + std::to_string(serving::kLargeBatch) + ": " + fixed(100 * s.sched_fraction_large, 2) +
              "% over " + std::to_string(s.large_steps) + " steps";
    } else {
      line += " (largest batch " + std::to_string(s.max_batch_size) + ")";
    }
    notes.push_back(line);
    notes.push_back(r.label + ": TTFT = queue (arrival to admission) p50/90 " + fixed(s.queue_s.p50 * 1e3, 1) + "/" +
                    fixed(s.queue_s.p90 * 1e3, 1) + " ms + after admission (prefill steps) p50/90 " +
                    fixed(s.admitted_ttft_s.p50 * 1e3, 1) + "/" + fixed(s.admitted_ttft_s.p90 * 1e3, 1) + " ms");
    if (r.cp_ranks > 1) {
      std::string ranks = r.label + ": peak KV a rank";
      for (size_t i = 0; i < r.rank_peak_kv_bytes.size(); ++i) {
        ranks += (i == 0 ? " " : ", ") + si(r.rank_peak_kv_bytes[i], "B");
      }
      notes.push_back(ranks + " (of " + si(r.kv_capacity_bytes, "B") + " each; " + si(s.peak_kv_bytes, "B") +
                      " together)");
    }
  }
  print_table(rows);
  for (const std::string& n : notes) std::cout << n << '\n';
}

nlohmann::json results_json(const serving::Trace& trace, const std::string& preset,
                            const serving::ReplayOptions& o, double speed, const std::vector<RunOutcome>& runs) {
  nlohmann::json doc = {{"kind", "replay"}, {"version", 1}};
  doc.update(run_info());
  doc["trace"] = serving::trace_json(trace);
  doc["options"] = {{"preset", preset},
                    {"layers", o.model.num_layers()},
                    {"page_size", o.page_size},
                    {"dtype", dtype_name(o.dtype)},
                    {"kv_dtype", dtype_name(o.kv_dtype)},
                    {"latent", o.latent_format == LatentFormat::fp8_blocked ? "fp8-blocked" : "plain"},
                    {"max_batch", o.scheduler.max_batch_size},
                    {"token_budget", o.scheduler.token_budget},
                    {"speed", speed},
                    {"gemms", o.gemms},
                    {"verify", o.verify},
                    {"cp_ranks", o.cp_ranks}};
  nlohmann::json list = nlohmann::json::array();
  for (const RunOutcome& run : runs) {
    nlohmann::json j = serving::run_json(run.result);
    if (!run.error.empty()) {
      j["error"] = run.error;
      j["skipped"] = "failed: " + run.error;
    }
    list.push_back(j);
  }
  doc["runs"] = list;
  return doc;
}

}  // namespace attnkit::tool
