// build_report: reads replay and bench result JSON into runs (report_runs.cc), and lays out the
// comparison tables and the plots (attention time vs KV length, fraction of ceiling, TTFT/TPOT
// distributions, memory, step time) in one HTML page. A plot with no data is left out.
#include "serving/report.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <map>
#include <sstream>

#include "attnkit/error.h"
#include "serving/report_page.h"
#include "serving/report_runs.h"

namespace attnkit::serving {

namespace {

using nlohmann::json;
using report_impl::html_escape;
using report_impl::Run;

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
constexpr size_t kMultiplesFrom = 6;  // curves in one plot from which each also gets a panel of its own

bool is_replay(const json& j) { return j.value("kind", "") == "replay"; }
bool is_bench(const json& j) { return j.contains("results") && j["results"].is_array(); }

// Column `name` of a run's row arrays ("steps" with "steps_columns").
int column(const json& run, const char* table, const std::string& name) {
  const json& cols = run[std::string(table) + "_columns"];
  for (size_t i = 0; i < cols.size(); ++i) {
    if (cols[i] == name) return static_cast<int>(i);
  }
  throw Error(detail::concat("report: the ", table, " records have no column '", name, "'"));
}

// The empirical distribution as the corners of its staircase, from 0 at the smallest value.
std::vector<std::pair<double, double>> cdf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> out;
  if (!v.empty()) out.emplace_back(std::max(v[0], 1e-6), 0.0);
  for (size_t i = 0; i < v.size(); ++i) {
    out.emplace_back(std::max(v[i], 1e-6), static_cast<double>(i + 1) / static_cast<double>(v.size()));
  }
  return out;
}

// The median y of the points in each quarter-octave of x, at the bin's median x: one curve a run
// that reads through thousands of steps.
std::vector<std::pair<double, double>> binned_medians(const std::vector<std::pair<double, double>>& pts) {
  std::map<int, std::vector<std::pair<double, double>>> bins;
  for (const auto& [x, y] : pts) bins[static_cast<int>(std::floor(std::log2(x) * 4))].emplace_back(x, y);
  std::vector<std::pair<double, double>> out;
  for (auto& [bin, v] : bins) {
    std::vector<double> xs, ys;
    for (const auto& [x, y] : v) xs.push_back(x), ys.push_back(y);
    std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(xs.size() / 2), xs.end());
    std::nth_element(ys.begin(), ys.begin() + static_cast<std::ptrdiff_t>(ys.size() / 2), ys.end());
    out.emplace_back(xs[xs.size() / 2], ys[ys.size() / 2]);
  }
  return out;
}

// Whether the positive values on one axis span more than a decade and a quarter (x20): such an
// axis is drawn log, where a linear one would crush the small values into its first tick.
bool spans_decades(const Plot& p, bool x_axis) {
  double lo = std::numeric_limits<double>::max(), hi = 0;
  for (const Series& s : p.series) {
    for (const auto& [x, y] : s.points) {
      const double v = x_axis ? x : y;
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  return hi > 0 && hi / lo >= 20;
}

void set_axes(Plot& p, bool tokens_on_x) {
  p.logx = spans_decades(p, true);
  p.logy = p.logy && spans_decades(p, false);
  if (tokens_on_x && p.logx) p.xformat = "%.0s%c";  // 1k, 10k, 100k
}

struct Page {
  std::ostringstream body;
  std::string missing;  // why plots could not be drawn at all
  template <typename Chart>
  void figure(const Chart& chart, const std::string& title, const std::string& caption, const char* cls) {
    std::string why;
    const std::string svg = render_svg(chart, &why);
    figure(svg, why, title, caption, cls);
  }
  void figure(const std::string& svg, const std::string& why, const std::string& title, const std::string& caption,
              const char* cls) {
    if (svg.empty()) {
      if (why != "no data") missing = why;
      return;
    }
    body << "<figure class=\"plot " << cls << "\"><h3>" << html_escape(title) << "</h3><div class=scroll>" << svg
         << "</div><figcaption>" << html_escape(caption) << "</figcaption></figure>\n";
  }
};

Series run_series(const Run& r, std::vector<std::pair<double, double>> pts, Series::Draw draw = Series::Draw::linespoints) {
  std::sort(pts.begin(), pts.end());
  return {r.label, std::move(pts), r.style, draw, 1.0};
}

// Every plot of the page, filled run by run.
struct Charts {
  double cpu_read = 0, gpu_read = 0;  // read-bandwidth ceilings (0: none measured)
  bool raw_points = false;            // draw each step beneath the median curves
  Plot decode{"KV tokens read in the step", "ms per layer", false, true, "%g", "%g", {}};
  Plot prefill = decode, bandwidth{"KV tokens read in the step", "% of read bandwidth", false, false, "%g", "%g", {}};
  Plot ttft{"TTFT (s)", "fraction of requests", false, false, "%g", "%g", {}};
  Plot tpot{"TPOT (s)", "fraction of requests", false, false, "%g", "%g", {}};
  std::vector<Series> raw_decode, raw_prefill;
  BarChart memory{{}, {}, {{"peak KV (MiB)", {}}, {"peak workspace (MiB)", {}}, {"one layer's weights (MiB)", {}}}};
  BarChart step{{}, {}, {{"attention (ms/step)", {}}, {"matrix products (ms/step)", {}}, {"scheduling + plan (ms/step)", {}}}};
  BarChart ceiling;
  std::vector<std::string> workloads;  // the ceiling chart's panels
  std::vector<std::map<std::string, double>> ceiling_rows;

  static void row(BarChart& c, const Run& r, std::initializer_list<double> values) {
    c.rows.push_back(r.label);
    c.colors.push_back(r.style.color);
    size_t i = 0;
    for (double v : values) c.panels[i++].values.push_back(v);
  }

  void add_replay(const Run& r) {
    const json& run = *r.run;
    const double layers = std::max(1, run["config"].value("num_layers", 1));
    const int c_kv = column(run, "steps", "kv_tokens"), c_attn = column(run, "steps", "attn_ms");
    const int c_pre = column(run, "steps", "num_prefill"), c_gemm = column(run, "steps", "gemm_ms");
    const int c_sched = column(run, "steps", "sched_ms");
    std::vector<std::pair<double, double>> dec, pre;
    double sum_attn = 0, sum_gemm = 0, sum_sched = 0;
    for (const json& st : run["steps"]) {
      const double x = st[c_kv].get<double>(), y = st[c_attn].get<double>() / layers;
      if (x > 0 && y > 0) (st[c_pre].get<int>() == 0 ? dec : pre).emplace_back(x, y);
      sum_attn += st[c_attn].get<double>();
      sum_gemm += st[c_gemm].get<double>();
      sum_sched += st[c_sched].get<double>();
    }
    if (raw_points) {
      raw_decode.push_back({"", dec, r.style, Series::Draw::points, 0.3});
      raw_prefill.push_back({"", pre, r.style, Series::Draw::points, 0.3});
    }
    if (!dec.empty()) decode.series.push_back(run_series(r, binned_medians(dec)));
    if (!pre.empty()) prefill.series.push_back(run_series(r, binned_medians(pre)));
    // Decode attention reads every cached K/V row once: bytes of one token's K and V in one layer
    // (page_bytes covers page_size tokens of every layer) times the KV tokens, over one layer's time.
    const double ceil = run.value("device", "") == "cuda" ? gpu_read : cpu_read;
    const double row_bytes =
        run["config"].value("page_bytes", 0.0) / std::max(1, run["config"].value("page_size", 1)) / layers;
    if (ceil > 0 && row_bytes > 0 && !dec.empty()) {
      std::vector<std::pair<double, double>> frac;
      for (const auto& [x, y] : dec) frac.emplace_back(x, 100.0 * x * row_bytes / (y * 1e-3) / ceil);
      bandwidth.series.push_back(run_series(r, binned_medians(frac)));
    }
    const double n = std::max<size_t>(1, run["steps"].size());
    row(step, r, {sum_attn / n, sum_gemm / n, sum_sched / n});
    std::vector<double> t1, t2;
    const int c_ttft = column(run, "requests", "ttft_s"), c_tpot = column(run, "requests", "tpot_s");
    const int c_out = column(run, "requests", "output_len");
    for (const json& q : run["requests"]) {
      t1.push_back(q[c_ttft].get<double>());
      if (q[c_out].get<int64_t>() > 1) t2.push_back(q[c_tpot].get<double>());
    }
    if (!t1.empty()) ttft.series.push_back(run_series(r, cdf(t1), Series::Draw::lines));
    if (!t2.empty()) tpot.series.push_back(run_series(r, cdf(t2), Series::Draw::lines));
    const json& s = run["summary"];
    row(memory, r, {s.value("peak_kv_bytes", 0.0) / (1 << 20), s.value("peak_workspace_bytes", 0.0) / (1 << 20),
                    run["config"].value("weight_bytes", 0.0) / (1 << 20)});
  }

  // A bench run: one point per workload at its KV tokens (older files: batch x length from the label).
  void add_bench(const Run& r) {
    std::vector<std::pair<double, double>> dec, pre;
    double workspace = 0;
    std::map<std::string, double> fractions;
    for (const json* res : r.results) {
      const std::string wl = res->value("workload", "");
      double kv = res->value("kv_tokens", 0.0);
      if (kv == 0) {
        const size_t x = wl.rfind(" x ");
        const size_t b = wl.rfind(' ', x == std::string::npos || x == 0 ? 0 : x - 1);
        if (x != std::string::npos && b != std::string::npos) kv = std::atof(wl.c_str() + b) * std::atof(wl.c_str() + x + 3);
      }
      const double y = res->value("median_ms", 0.0);
      if (kv > 0 && y > 0) (wl.find(" decode ") != std::string::npos ? dec : pre).emplace_back(kv, y);
      workspace = std::max(workspace, res->value("workspace_bytes", 0.0));
      if (res->contains("fraction_of_ceiling")) {
        fractions[wl] = 100.0 * (*res)["fraction_of_ceiling"].get<double>();
        if (std::find(workloads.begin(), workloads.end(), wl) == workloads.end()) workloads.push_back(wl);
      }
    }
    if (!dec.empty()) decode.series.push_back(run_series(r, dec));
    if (!pre.empty()) prefill.series.push_back(run_series(r, pre));
    row(memory, r, {kNone, workspace / (1 << 20), kNone});
    if (!fractions.empty()) {
      ceiling.rows.push_back(r.label);
      ceiling.colors.push_back(r.style.color);
      ceiling_rows.push_back(fractions);
    }
  }

  // Once every run is in: the ceiling chart's panels, the raw samples under the curves, the axes.
  void finish() {
    for (const std::string& wl : workloads) {
      // One scale, to 100% at least, so that panels compare at a glance.
      BarChart::Panel p{workloads.size() == 1 ? "% of ceiling" : wl + " (%)", {}, 100.0};
      for (const auto& fr : ceiling_rows) p.values.push_back(fr.count(wl) ? fr.at(wl) : kNone);
      ceiling.panels.push_back(std::move(p));
    }
    decode.series.insert(decode.series.begin(), raw_decode.begin(), raw_decode.end());
    prefill.series.insert(prefill.series.begin(), raw_prefill.begin(), raw_prefill.end());
    set_axes(decode, true);
    set_axes(prefill, true);
    set_axes(bandwidth, true);
    set_axes(ttft, false);
    set_axes(tpot, false);
  }
};

}  // namespace

std::string build_report(const std::vector<ReportInput>& inputs, const std::string& title) {
  for (const ReportInput& in : inputs) {
    ATTNKIT_CHECK(is_replay(in.data) || is_bench(in.data), "report: ", in.file,
                  " is neither a replay result (\"kind\": \"replay\") nor a bench result (\"results\": [...])");
  }
  const std::vector<Run> runs = report_impl::collect_runs(inputs);
  Charts ch;
  // Read-bandwidth ceilings from the first bench file measured with --ceilings.
  for (const ReportInput& in : inputs) {
    if (!is_bench(in.data) || !in.data.contains("ceilings") || !in.data["ceilings"].is_object()) continue;
    const json& c = in.data["ceilings"];
    if (ch.cpu_read == 0.0) ch.cpu_read = c.value("cpu_read_bytes_per_s", 0.0);
    if (ch.gpu_read == 0.0) ch.gpu_read = c.value("gpu_read_bytes_per_s", 0.0);
  }
  size_t drawn = 0;
  for (const Run& r : runs) drawn += r.skipped.empty();
  ch.raw_points = drawn <= 4;  // while few runs share a plot
  for (const Run& r : runs) {
    if (!r.skipped.empty()) continue;
    if (r.replay) ch.add_replay(r);
    else ch.add_bench(r);
  }
  ch.finish();

  Page page;
  const char* medians = ch.raw_points ? "The curve is the median of the steps (dots) in each quarter-octave of KV length"
                                   : "Each curve is the median of a run's steps in each quarter-octave of KV length";
  page.figure(ch.decode, "Decode steps: attention time per layer vs KV tokens read",
              std::string(medians) + " (attention time of all layers over the layer count); bench points are the median "
                  "of one call. Decode is memory-bound, so time grows with the KV tokens read.", "lines");
  // Many curves in one plot: each also in a panel of its own, over the others in grey.
  size_t curves = 0;
  for (const Series& s : ch.decode.series) curves += !s.title.empty();
  if (curves >= kMultiplesFrom) {
    std::string why;
    const std::string svg = render_small_multiples(ch.decode, 3, &why);
    page.figure(svg, why, "Decode steps, one panel per run",
                "The plot above, a panel a run: the run's curve in its colour, every other run's in grey, on the same "
                "axes.", "multiples");
  }
  page.figure(ch.prefill, "Steps with prefill: attention time per layer vs KV tokens read",
              std::string(medians) + "; bench prefill and mixed workloads are the median of one call.", "lines");
  page.figure(ch.ceiling, "Bench: fraction of the measured ceiling",
              "Bench results measured with --ceilings: bytes/s against the device's read bandwidth for decode, "
              "FLOP/s against its matrix rate otherwise.", "bars");
  page.figure(ch.bandwidth, "Replay decode steps: KV read rate as a fraction of the measured read bandwidth",
              "KV bytes read by one layer's attention over its time, against the device's read bandwidth from a bench "
              "file measured with --ceilings (median per quarter-octave); a KV small enough to stay in the CPU's "
              "caches can read faster than memory.", "lines");
  page.figure(ch.ttft, "Time to first token", "Distribution of the time from a request's arrival to its first output "
                                           "token.", "lines");
  page.figure(ch.tpot, "Time per output token", "Distribution of each request's mean time between output tokens "
                                             "(requests with more than one output token).", "lines");
  page.figure(ch.memory, "Memory", "Peak KV cache in use, the backend's peak workspace, and the one layer of weights "
                                "the GEMMs use; a metric no run has is left out.", "bars");
  page.figure(ch.step, "Mean step time by part", "Mean step time split into attention, the layer's matrix products "
                                              "(GPU runs only) and the host's scheduling and planning.", "bars");

  std::time_t now = std::time(nullptr);
  char date[64];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>" << html_escape(title)
       << "</title>\n<style>"
       << "body{font-family:sans-serif;margin:2em;max-width:1400px;color:#222}"
       << "table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:12px}"
       << "th,td{border:1px solid #ccc;padding:2px 6px;text-align:right;white-space:nowrap}"
       << "th{background:#f3f3f3;white-space:normal;vertical-align:bottom}"
       << "td:nth-child(-n+2),th:nth-child(-n+2),td[colspan]{text-align:left}td[colspan]{color:#777}"
       << ".sw{vertical-align:middle}.shared{font-size:13px;color:#444;margin:.2em 0}"
       << "figure{margin:2em 0}figure h3{margin:0 0 .3em;font-size:16px}.scroll{overflow-x:auto}"
       << "figcaption{font-size:13px;color:#555;max-width:900px}.note{color:#a40}"
       << "</style></head><body>\n<h1>" << html_escape(title) << "</h1>\n<p>Generated " << date << " from "
       << inputs.size() << " result file(s), " << runs.size() << " run(s). Times come from the replay's virtual clock (each step advances it by its measured wall time; idle gaps "
          "between arrivals are skipped).</p>\n";
  if (!page.missing.empty()) html << "<p class=note>Plots left out: " << html_escape(page.missing) << ".</p>\n";
  html << "<h2>Runs</h2>\n" << report_impl::comparison_tables(runs) << report_impl::input_details(inputs) << "<h2>Plots</h2>\n"
       << page.body.str() << "</body></html>\n";
  return html.str();
}

}  // namespace attnkit::serving
