// Replay results as JSON: one object a run, records thinned evenly so files stay small.
#include "serving/replay_json.h"

namespace attnkit::serving {

namespace {

// Every k-th element so that at most kMaxJsonRecords remain (the last one always kept).
template <typename T, typename F>
nlohmann::json thinned(const std::vector<T>& v, F to_json) {
  nlohmann::json out = nlohmann::json::array();
  if (v.empty()) return out;
  const size_t stride = (v.size() + kMaxJsonRecords - 1) / kMaxJsonRecords;
  for (size_t i = 0; i < v.size(); i += stride) out.push_back(to_json(v[i]));
  if ((v.size() - 1) % stride != 0) out.push_back(to_json(v.back()));
  return out;
}

nlohmann::json pct(const Percentiles& p) {
  return {{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"mean", p.mean}, {"max", p.max}};
}

}  // namespace

nlohmann::json trace_json(const Trace& t) {
  return {{"name", t.name},       {"format", t.format},   {"has_arrivals", t.has_arrivals},
          {"rows", t.rows},       {"dropped", t.dropped}, {"clamped", t.clamped},
          {"requests", t.requests.size()}, {"prefix_hit_ratio", t.prefix_hit_ratio}};
}

nlohmann::json run_json(const ReplayResult& r) {
  nlohmann::json j = {{"label", r.label},
                      {"prefill_backend", r.prefill_backend},
                      {"decode_backend", r.decode_backend},
                      {"device", r.device},
                      {"skipped", r.skipped}};
  if (!r.skipped.empty()) return j;
  const Summary& s = r.summary;
  j["config"] = {{"model", r.model},         {"num_layers", r.num_layers},     {"gemms", r.gemms},
                 {"kv_pages", r.kv_pages},   {"page_size", r.page_size},       {"page_bytes", r.page_bytes},
                 {"kv_capacity_bytes", r.kv_capacity_bytes}, {"weight_bytes", r.weight_bytes},
                 {"cp_ranks", r.cp_ranks}};
  if (r.cp_ranks > 1) j["rank_peak_kv_bytes"] = r.rank_peak_kv_bytes;
  j["summary"] = {{"requests", s.num_requests},
                  {"output_tokens", s.output_tokens},
                  {"prompt_tokens", s.prompt_tokens},
                  {"steps", s.num_steps},
                  {"makespan_s", s.makespan_s},
                  {"wall_s", r.wall_s},
                  {"output_tokens_per_s", s.output_tokens_per_s},
                  {"total_tokens_per_s", s.total_tokens_per_s},
                  {"ttft_s", pct(s.ttft_s)},
                  {"queue_s", pct(s.queue_s)},
                  {"admitted_ttft_s", pct(s.admitted_ttft_s)},
                  {"tpot_s", pct(s.tpot_s)},
                  {"itl_s", pct(s.itl_s)},
                  {"e2e_s", pct(s.e2e_s)},
                  {"peak_kv_bytes", s.peak_kv_bytes},
                  {"peak_workspace_bytes", s.peak_workspace_bytes},
                  {"preemptions", r.num_preemptions},
                  {"attn_fraction", s.attn_fraction},
                  {"sched_fraction", s.sched_fraction},
                  {"sched_us_p50", s.sched_us_p50},
                  {"sched_fraction_batch256", s.sched_fraction_large},
                  {"steps_batch256", s.large_steps},
                  {"max_batch_size", s.max_batch_size}};
  nlohmann::json verified = nlohmann::json::array();
  for (const VerifyRecord& v : r.verified) {
    verified.push_back({{"step", v.step}, {"layer", v.layer}, {"mode", v.mode}, {"batch_size", v.batch_size},
                        {"rel_err", v.rel_err}, {"tolerance", v.tolerance}, {"passed", v.passed},
                        {"message", v.message}});
  }
  j["verified"] = verified;
  // Columns, not objects: a few thousand rows stay a few hundred kilobytes.
  j["steps_columns"] = {"batch_size", "num_tokens", "num_decode", "num_prefill", "kv_tokens", "max_kv_len",
                        "step_ms", "attn_ms", "gemm_ms", "sched_ms"};
  j["steps"] = thinned(r.steps, [](const StepRecord& s) {
    return nlohmann::json::array({s.batch_size, s.num_tokens, s.num_decode, s.num_prefill, s.kv_tokens, s.max_kv_len,
                                  s.step_ms, s.attn_ms, s.gemm_ms, s.sched_ms});
  });
  j["requests_columns"] = {"arrival_s", "ttft_s", "tpot_s", "e2e_s", "prompt_len", "output_len", "preemptions", "queue_s"};
  j["requests"] = thinned(r.requests, [](const RequestRecord& q) {
    return nlohmann::json::array(
        {q.arrival_s, q.ttft_s, q.tpot_s, q.e2e_s, q.prompt_len, q.output_len, q.num_preemptions, q.queue_s});
  });
  j["itl_s"] = thinned(r.itl_s, [](float x) { return x; });
  return j;
}

}  // namespace attnkit::serving
