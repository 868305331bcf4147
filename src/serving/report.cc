// build_report: reads replay and bench result JSON, lays out summary tables and the plots (latency
// vs KV length, fraction of ceiling, TTFT/TPOT distributions, memory, step time) in one HTML page.
#include "serving/report.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <regex>
#include <sstream>

#include "attnkit/error.h"

namespace attnkit::serving {

namespace {

using nlohmann::json;

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string ms(double seconds) { return num(seconds * 1e3, seconds < 0.01 ? 2 : 1); }

std::string mib(double bytes) { return num(bytes / (1 << 20), bytes < (10 << 20) ? 2 : 0) + " MiB"; }

bool is_replay(const json& j) { return j.value("kind", "") == "replay"; }
bool is_bench(const json& j) { return j.contains("results") && j["results"].is_array(); }

// A run's label, with the file's index when several files are compared.
std::string run_name(const json& run, size_t file_idx, size_t num_files) {
  std::string name = run.value("label", "?");
  if (num_files > 1) name += " [" + std::to_string(file_idx + 1) + "]";
  return name;
}

// Column `name` of a run's row arrays ("steps" with "steps_columns").
int column(const json& run, const char* table, const std::string& name) {
  const json& cols = run[std::string(table) + "_columns"];
  for (size_t i = 0; i < cols.size(); ++i) {
    if (cols[i] == name) return static_cast<int>(i);
  }
  throw Error(detail::concat("report: the ", table, " records have no column '", name, "'"));
}

std::vector<std::pair<double, double>> cdf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.emplace_back(std::max(v[i], 1e-6), static_cast<double>(i + 1) / static_cast<double>(v.size()));
  }
  return out;
}

// One result of `attnkit bench --json`, or of bench/run_attnkit.py, which wraps the tool's result
// under "tool" beside the peers' fields.
const json& bench_result(const json& entry) { return entry.contains("tool") ? entry["tool"] : entry; }

// "llama3-8b decode 4 x 2048" -> batch 4, kv_len 2048 (the label bench writes).
bool parse_bench_label(const std::string& label, std::string& phase, double& batch, double& kv_len) {
  static const std::regex re(R"((prefill|decode|mixed) (\d+) x (\d+))");
  std::smatch m;
  if (!std::regex_search(label, m, re)) return false;
  phase = m[1];
  batch = std::stod(m[2]);
  kv_len = std::stod(m[3]);
  return true;
}

Plot make_plot(std::string title, std::string xlabel, std::string ylabel, Plot::Style style, bool logx = false,
               bool logy = false) {
  Plot p;
  p.title = std::move(title);
  p.xlabel = std::move(xlabel);
  p.ylabel = std::move(ylabel);
  p.style = style;
  p.logx = logx;
  p.logy = logy;
  return p;
}

struct Page {
  std::ostringstream body;
  void plot(const Plot& p, const std::string& caption) {
    std::string why;
    const std::string svg = render_svg(p, &why);
    body << "<figure>";
    if (svg.empty()) body << "<p class=note>" << esc(p.title) << ": " << esc(why) << "</p>";
    else body << svg;
    body << "<figcaption>" << esc(caption) << "</figcaption></figure>\n";
  }
  void table(const std::vector<std::vector<std::string>>& rows) {
    body << "<table>";
    for (size_t r = 0; r < rows.size(); ++r) {
      body << "<tr>";
      for (const std::string& c : rows[r]) body << (r == 0 ? "<th>" : "<td>") << esc(c) << (r == 0 ? "</th>" : "</td>");
      body << "</tr>";
    }
    body << "</table>\n";
  }
};

void replay_tables(Page& page, const std::vector<ReportInput>& inputs) {
  for (size_t f = 0; f < inputs.size(); ++f) {
    const json& j = inputs[f].data;
    if (!is_replay(j)) continue;
    const json& t = j["trace"];
    const json& o = j["options"];
    page.body << "<h3>[" << f + 1 << "] " << esc(inputs[f].file) << "</h3><p>trace " << esc(t.value("name", "?"))
              << " (" << esc(t.value("format", "?")) << "): " << t.value("requests", 0) << " requests replayed of "
              << t.value("rows", 0) << " rows, " << t.value("dropped", 0) << " dropped (empty), "
              << t.value("clamped", 0) << " clamped to the context limit";
    if (t.value("prefix_hit_ratio", 0.0) > 0)
      page.body << "; shared-prefix tokens " << num(100 * t.value("prefix_hit_ratio", 0.0), 1) << "%";
    page.body << ". Model " << esc(o.value("preset", "?")) << ", " << o.value("layers", 0) << " layers, speed x"
              << o.value("speed", 1.0) << ", device " << esc(j.value("device_name", "?")) << ", "
              << esc(j.value("date", "")) << ", commit " << esc(j.value("commit", "?")) << ".</p>\n";
    std::vector<std::vector<std::string>> rows = {
        {"run", "out tok/s", "TTFT p50/p90/p99 ms", "TPOT p50/p90/p99 ms", "ITL p50/p99 ms", "peak KV", "workspace",
         "preempt", "attention share", "sched overhead", "verified"}};
    for (const json& run : j["runs"]) {
      if (!run.value("skipped", "").empty()) {
        rows.push_back({run.value("label", "?"), "skipped: " + run.value("skipped", "")});
        continue;
      }
      const json& s = run["summary"];
      auto p3 = [&](const char* k) { return ms(s[k]["p50"]) + " / " + ms(s[k]["p90"]) + " / " + ms(s[k]["p99"]); };
      size_t passed = 0;
      for (const json& v : run["verified"]) passed += v.value("passed", false);
      rows.push_back({run.value("label", "?"), num(s["output_tokens_per_s"], 1), p3("ttft_s"), p3("tpot_s"),
                      ms(s["itl_s"]["p50"]) + " / " + ms(s["itl_s"]["p99"]), mib(s["peak_kv_bytes"]),
                      mib(s["peak_workspace_bytes"]), std::to_string(s.value("preemptions", 0)),
                      num(100 * s.value("attn_fraction", 0.0), 1) + "%",
                      num(100 * s.value("sched_fraction", 0.0), 2) + "%",
                      run["verified"].empty() ? "-" : std::to_string(passed) + "/" + std::to_string(run["verified"].size())});
    }
    page.table(rows);
  }
}

void bench_tables(Page& page, const std::vector<ReportInput>& inputs) {
  for (size_t f = 0; f < inputs.size(); ++f) {
    const json& j = inputs[f].data;
    if (!is_bench(j)) continue;
    page.body << "<h3>[" << f + 1 << "] " << esc(inputs[f].file) << " (bench, " << esc(j.value("phase", "?"))
              << ")</h3>\n";
    std::vector<std::vector<std::string>> rows = {{"backend", "workload", "median ms", "tokens/s", "of ceiling"}};
    for (const json& entry : j["results"]) {
      const json& r = bench_result(entry);
      if (!r.value("skipped", "").empty()) {
        rows.push_back({r.value("backend", "?"), r.value("workload", ""), "skipped: " + r.value("skipped", "")});
        continue;
      }
      rows.push_back({r.value("backend", "?"), r.value("workload", ""), num(r.value("median_ms", 0.0), 3),
                      num(r.value("tokens_per_s", 0.0), 0),
                      r.contains("fraction_of_ceiling") ? num(100 * r["fraction_of_ceiling"].get<double>(), 1) + "%"
                                                        : "-"});
    }
    page.table(rows);
  }
}

}  // namespace

std::string build_report(const std::vector<ReportInput>& inputs, const std::string& title) {
  for (const ReportInput& in : inputs) {
    ATTNKIT_CHECK(is_replay(in.data) || is_bench(in.data), "report: ", in.file,
                  " is neither a replay result (\"kind\": \"replay\") nor a bench result (\"results\": [...])");
  }
  const size_t nf = inputs.size();
  // Read-bandwidth ceilings from the first bench file measured with --ceilings (0: none given).
  double cpu_read = 0.0, gpu_read = 0.0;
  for (const ReportInput& in : inputs) {
    if (!is_bench(in.data) || !in.data.contains("ceilings")) continue;
    const json& c = in.data["ceilings"];
    if (cpu_read == 0.0) cpu_read = c.value("cpu_read_bytes_per_s", 0.0);
    if (gpu_read == 0.0) gpu_read = c.value("gpu_read_bytes_per_s", 0.0);
  }
  Plot latency = make_plot("Attention time per layer vs KV tokens read", "KV tokens in the step", "ms per layer",
                           Plot::Style::points, true, true);
  Plot ttft = make_plot("Time to first token", "TTFT (s)", "fraction of requests", Plot::Style::lines, true);
  Plot tpot = make_plot("Time per output token", "TPOT (s)", "fraction of requests", Plot::Style::lines, true);
  Plot bandwidth = make_plot("Replay decode steps: attention's KV read rate as a fraction of the measured ceiling",
                             "KV tokens in the step", "% of read bandwidth", Plot::Style::points, true);
  Plot memory = make_plot("Memory", "", "MiB", Plot::Style::bars);
  Plot step = make_plot("Mean step time by part", "", "ms per step", Plot::Style::bars);
  Plot ceiling = make_plot("Fraction of the measured ceiling (attnkit bench --ceilings)", "", "% of ceiling",
                           Plot::Style::bars);
  int run_color = 0;  // one colour per run across the plots
  Series kv{"peak KV", {}, -1, 7}, ws{"workspace", {}, -1, 7}, weights{"layer weights", {}, -1, 7};
  Series attn_part{"attention", {}, -1, 7}, gemm_part{"matrix products", {}, -1, 7},
      sched_part{"scheduling + plan", {}, -1, 7};

  for (size_t f = 0; f < nf; ++f) {
    const json& j = inputs[f].data;
    if (is_replay(j)) {
      for (const json& run : j["runs"]) {
        if (!run.value("skipped", "").empty()) continue;
        const std::string name = run_name(run, f, nf);
        const double layers = std::max(1, run["config"].value("num_layers", 1));
        const int c_kv = column(run, "steps", "kv_tokens"), c_attn = column(run, "steps", "attn_ms");
        const int c_pre = column(run, "steps", "num_prefill"), c_step = column(run, "steps", "step_ms");
        const int c_gemm = column(run, "steps", "gemm_ms"), c_sched = column(run, "steps", "sched_ms");
        const int color = run_color++;
        Series decode{name + " decode steps", {}, color, 7}, mixed{name + " steps with prefill", {}, color, 5};
        double sum_attn = 0, sum_gemm = 0, sum_sched = 0, sum_step = 0;
        for (const json& st : run["steps"]) {
          const double x = st[c_kv].get<double>(), y = st[c_attn].get<double>() / layers;
          if (x > 0 && y > 0) (st[c_pre].get<int>() == 0 ? decode : mixed).points.emplace_back(x, y);
          sum_attn += st[c_attn].get<double>();
          sum_gemm += st[c_gemm].get<double>();
          sum_sched += st[c_sched].get<double>();
          sum_step += st[c_step].get<double>();
        }
        // Decode attention reads every cached K/V row once: bytes of one token's K and V in one layer
        // (page_bytes covers page_size tokens of every layer) times the KV tokens, over the time of one layer.
        const double ceiling = run.value("device", "") == "cuda" ? gpu_read : cpu_read;
        const double row_bytes =
            run["config"].value("page_bytes", 0.0) / std::max(1, run["config"].value("page_size", 1)) / layers;
        if (ceiling > 0 && row_bytes > 0) {
          Series frac{name, {}, color, 7};
          for (const auto& [x, y] : decode.points) frac.points.emplace_back(x, 100.0 * x * row_bytes / (y * 1e-3) / ceiling);
          bandwidth.series.push_back(std::move(frac));
        }
        latency.series.push_back(std::move(decode));
        latency.series.push_back(std::move(mixed));
        const double n = std::max<size_t>(1, run["steps"].size());
        const double cat = static_cast<double>(step.bar_labels.size());
        step.bar_labels.push_back(name);
        attn_part.points.emplace_back(cat, sum_attn / n);
        gemm_part.points.emplace_back(cat, sum_gemm / n);
        sched_part.points.emplace_back(cat, sum_sched / n);
        (void)sum_step;
        std::vector<double> t1, t2;
        const int c_ttft = column(run, "requests", "ttft_s"), c_tpot = column(run, "requests", "tpot_s");
        const int c_out = column(run, "requests", "output_len");
        for (const json& q : run["requests"]) {
          t1.push_back(q[c_ttft].get<double>());
          if (q[c_out].get<int64_t>() > 1) t2.push_back(q[c_tpot].get<double>());
        }
        ttft.series.push_back({name, cdf(t1), color, 7});
        tpot.series.push_back({name, cdf(t2), color, 7});
        const double mcat = static_cast<double>(memory.bar_labels.size());
        memory.bar_labels.push_back(name);
        kv.points.emplace_back(mcat, run["summary"].value("peak_kv_bytes", 0.0) / (1 << 20));
        ws.points.emplace_back(mcat, run["summary"].value("peak_workspace_bytes", 0.0) / (1 << 20));
        weights.points.emplace_back(mcat, run["config"].value("weight_bytes", 0.0) / (1 << 20));
      }
    } else {
      std::map<std::string, Series> by_backend;
      std::map<std::string, Series> frac_by_backend;
      for (const json& entry : j["results"]) {
        const json& r = bench_result(entry);
        if (!r.value("skipped", "").empty()) continue;
        const std::string backend = r.value("backend", "?");
        std::string phase;
        double batch = 0, kv_len = 0;
        // Newer results carry the KV token count; older ones only the "B x L" label.
        const bool has_fields = r.contains("kv_tokens") && r.value("kv_tokens", 0.0) > 0;
        if (has_fields || parse_bench_label(r.value("workload", ""), phase, batch, kv_len)) {
          if (has_fields) phase = j.value("phase", "?");
          Series& s = by_backend[backend];
          if (s.points.empty()) s.color = run_color++;
          s.point_type = 9;
          s.title = backend + " (bench " + phase + ")" + (nf > 1 ? " [" + std::to_string(f + 1) + "]" : "");
          s.points.emplace_back(has_fields ? r.value("kv_tokens", 0.0) : batch * kv_len, r.value("median_ms", 0.0));
        }
        if (r.contains("fraction_of_ceiling")) {
          const std::string wl = r.value("workload", "");
          auto it = std::find(ceiling.bar_labels.begin(), ceiling.bar_labels.end(), wl);
          const double cat = static_cast<double>(it - ceiling.bar_labels.begin());
          if (it == ceiling.bar_labels.end()) ceiling.bar_labels.push_back(wl);
          Series& s = frac_by_backend[backend];
          s.title = backend;
          s.points.emplace_back(cat, 100.0 * r["fraction_of_ceiling"].get<double>());
        }
        const double mcat = static_cast<double>(memory.bar_labels.size());
        memory.bar_labels.push_back(backend + " (bench)" + (nf > 1 ? " [" + std::to_string(f + 1) + "]" : ""));
        ws.points.emplace_back(mcat, r.value("workspace_bytes", 0.0) / (1 << 20));
      }
      for (auto& [name, s] : by_backend) latency.series.push_back(std::move(s));
      for (auto& [name, s] : frac_by_backend) ceiling.series.push_back(std::move(s));
    }
  }
  memory.series = {kv, ws, weights};
  step.series = {attn_part, gemm_part, sched_part};

  Page page;
  replay_tables(page, inputs);
  bench_tables(page, inputs);
  page.plot(latency, "Each point is one replay step (attention time of all layers divided by the layer count) or one "
                     "bench workload (median of one call); decode steps are memory-bound, so time grows with the KV "
                     "tokens read.");
  page.plot(ceiling, "Bench results measured with --ceilings: bytes/s against the device's read bandwidth for decode, "
                     "FLOP/s against its matrix rate otherwise.");
  page.plot(bandwidth, "Each decode step of a replay: KV bytes read by one layer's attention over its time, against "
                       "the device's read bandwidth from a bench file measured with --ceilings (pass one to see this); a KV "
                       "small enough to stay in the CPU's caches can read faster than memory.");
  page.plot(ttft, "Distribution of the time from a request's arrival to its first output token.");
  page.plot(tpot, "Distribution of each request's mean time between output tokens (requests with >1 output).");
  page.plot(memory, "Peak KV cache in use, the backend's peak workspace, and the one layer of weights the GEMMs use.");
  page.plot(step, "Mean step time split into attention, the layer's matrix products (GPU only) and the host's "
                  "scheduling and planning.");

  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>" << esc(title) << "</title>\n<style>"
       << "body{font-family:sans-serif;margin:2em;max-width:1100px;color:#222}"
       << "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
       << "th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}"
       << "td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0}"
       << "figcaption{font-size:13px;color:#555;max-width:760px}.note{color:#a40}"
       << "</style></head><body>\n<h1>" << esc(title) << "</h1>\n<p>Generated " << date << " from " << nf
       << " result file(s). Times come from the replay's virtual clock (each step advances it by its measured wall "
          "time; idle gaps between arrivals are skipped).</p>\n<h2>Results</h2>\n"
       << page.body.str() << "</body></html>\n";
  return html.str();
}

}  // namespace attnkit::serving
