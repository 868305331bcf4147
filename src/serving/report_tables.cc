// The report's tables: one comparison table for replay runs and one for bench runs (a row a run,
// the fields that differ between runs as columns, then the key figures), and the input files' notes.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "serving/report_page.h"

namespace attnkit::serving::report_impl {

namespace {

using nlohmann::json;
using Row = std::vector<std::string>;  // cells, already HTML

std::string ms(double seconds) { return fixed(seconds * 1e3, seconds < 0.01 ? 2 : 1); }

std::string mib(double bytes) { return fixed(bytes / (1 << 20), bytes < (10 << 20) ? 2 : 0) + " MiB"; }

double num(const json& j, const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0; }

std::string pct(const json& s, const char* key, const char* a, const char* b) {
  if (!s.contains(key)) return "-";
  return ms(num(s[key], a)) + " / " + ms(num(s[key], b));
}

// The fields worth a column among `runs`: those whose value differs between them and that the
// labels do not already say.
std::vector<std::pair<std::string, std::string>> varying(const std::vector<const Run*>& runs) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::vector<std::string>& in_label = runs[0]->label_fields;
  for (const auto& kh : field_headings()) {
    if (kh.first == "kind" || std::find(in_label.begin(), in_label.end(), kh.first) != in_label.end()) continue;
    if (field_varies(runs, kh.first)) out.push_back(kh);
  }
  return out;
}

// "All 16 replay runs: dtype bf16, device ..." above a table, for the fields its runs share.
std::string shared_line(const std::vector<const Run*>& runs, const char* what) {
  const std::string shared = shared_fields(runs);
  if (shared.empty()) return "";
  const std::string whose = runs.size() == 1 ? "The one " + std::string(what, std::strlen(what) - 1)
                                             : "All " + std::to_string(runs.size()) + " " + what;
  return "<p class=shared>" + whose + ": " + html_escape(shared) + ".</p>\n";
}

// Drops the columns (from `first` on) that hold nothing but `empty` in every row.
void drop_empty_columns(std::vector<Row>& rows, size_t first, const std::vector<std::string>& empty) {
  for (size_t c = rows[0].size(); c-- > first;) {
    bool all_empty = rows.size() > 1;
    for (size_t r = 1; r < rows.size() && all_empty; ++r) {
      all_empty = c >= rows[r].size() || std::find(empty.begin(), empty.end(), rows[r][c]) != empty.end();
    }
    if (!all_empty) continue;
    for (Row& row : rows) {
      if (c < row.size()) row.erase(row.begin() + static_cast<std::ptrdiff_t>(c));
    }
  }
}

std::string table_html(const std::vector<Row>& rows, const char* cls) {
  std::ostringstream t;
  t << "<div class=scroll><table class=\"" << cls << "\">";
  for (size_t r = 0; r < rows.size(); ++r) {
    t << "<tr>";
    const size_t span = rows[0].size() - rows[r].size() + 1;  // a skipped run's reason fills its row
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const bool last_short = c + 1 == rows[r].size() && span > 1;
      t << (r == 0 ? "<th" : "<td") << (last_short ? " colspan=" + std::to_string(span) : "") << ">" << rows[r][c]
        << (r == 0 ? "</th>" : "</td>");
    }
    t << "</tr>";
  }
  t << "</table></div>\n";
  return t.str();
}

Row identity(const Run& r, const std::vector<std::pair<std::string, std::string>>& cols) {
  Row row = {r.skipped.empty() ? swatch(r) : "", html_escape(r.label)};
  for (const auto& [key, heading] : cols) row.push_back(html_escape(r.field(key)));
  return row;
}

std::string replay_table(const std::vector<const Run*>& runs) {
  const auto cols = varying(runs);
  Row head = {"", "run"};
  for (const auto& c : cols) head.push_back(html_escape(c.second));
  const size_t first_figure = head.size();
  for (const char* h : {"out tok/s", "TTFT ms p50 / p99", "of it queued ms p50 / p99", "after admission ms p50 / p99",
                        "TPOT ms p50 / p99", "ITL ms p50 / p99", "peak KV",
                        "work&shy;space", "pre&shy;empted", "attention share", "sched overhead", "verified"}) {
    head.push_back(h);
  }
  std::vector<Row> rows = {head};
  for (const Run* r : runs) {
    Row row = identity(*r, cols);
    if (!r->skipped.empty()) {
      row.push_back("skipped: " + html_escape(r->skipped));
      rows.push_back(row);
      continue;
    }
    const json& s = (*r->run)["summary"];
    size_t passed = 0, checked = 0;
    for (const json& v : r->run->value("verified", json::array())) passed += v.value("passed", false), ++checked;
    for (const std::string& cell :
         {fixed(num(s, "output_tokens_per_s"), 1), pct(s, "ttft_s", "p50", "p99"), pct(s, "queue_s", "p50", "p99"),
          pct(s, "admitted_ttft_s", "p50", "p99"), pct(s, "tpot_s", "p50", "p99"),
          pct(s, "itl_s", "p50", "p99"), mib(num(s, "peak_kv_bytes")), mib(num(s, "peak_workspace_bytes")),
          std::to_string(s.value("preemptions", 0)), fixed(100 * num(s, "attn_fraction"), 1) + "%",
          fixed(100 * num(s, "sched_fraction"), 2) + "%",
          checked == 0 ? "-" : std::to_string(passed) + "/" + std::to_string(checked)}) {
      row.push_back(cell);
    }
    rows.push_back(row);
  }
  drop_empty_columns(rows, first_figure, {"0.00 MiB", "-"});
  return table_html(rows, "runs");
}

std::string bench_table(const std::vector<const Run*>& runs) {
  auto cols = varying(runs);
  // The workload is the bench's x: always a column, each result's own.
  cols.erase(std::remove_if(cols.begin(), cols.end(), [](const auto& c) { return c.first == "workload"; }), cols.end());
  cols.insert(cols.begin(), {"workload", "workload"});
  Row head = {"", "run"};
  for (const auto& c : cols) head.push_back(html_escape(c.second));
  const size_t first_figure = head.size();
  for (const char* h : {"median ms", "tokens/s", "of ceiling", "workspace"}) head.push_back(h);
  std::vector<Row> rows = {head};
  for (const Run* r : runs) {
    if (!r->skipped.empty()) {
      Row row = identity(*r, cols);
      row.push_back("skipped: " + html_escape(r->skipped));
      rows.push_back(row);
      continue;
    }
    for (const json* res : r->results) {
      Row row = identity(*r, cols);
      for (size_t c = 0; c < cols.size(); ++c) {
        if (cols[c].first == "workload") row[2 + c] = html_escape(res->value("workload", ""));
      }
      row.push_back(fixed(num(*res, "median_ms"), 3));
      row.push_back(fixed(num(*res, "tokens_per_s"), 0));
      row.push_back(res->contains("fraction_of_ceiling") ? fixed(100 * num(*res, "fraction_of_ceiling"), 1) + "%"
                                                         : "-");
      row.push_back(mib(num(*res, "workspace_bytes")));
      rows.push_back(row);
    }
  }
  drop_empty_columns(rows, first_figure, {"0.00 MiB", "-"});
  return table_html(rows, "runs");
}

}  // namespace

std::string html_escape(const std::string& s) {
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

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string swatch(const Run& run) {
  // The plots' dashes (solid, dashed, dash-dot) and marker shapes, small.
  static const char* dashes[3] = {"", " stroke-dasharray='5,3'", " stroke-dasharray='6,2,1.5,2'"};
  static const char* markers[5] = {"<circle cx='14' cy='6' r='3.6'/>", "<rect x='10.6' y='2.6' width='6.8' height='6.8'/>",
                                   "<path d='M14,1.6 L18.4,9.4 L9.6,9.4 z'/>", "<path d='M14,1.4 L18.6,6 L14,10.6 L9.4,6 z'/>",
                                   "<path d='M14,10.4 L18.4,2.6 L9.6,2.6 z'/>"};
  const std::string& c = run.style.color;
  return "<svg class=sw width=28 height=12 viewBox='0 0 28 12'><line x1='1' y1='6' x2='27' y2='6' stroke='" + c +
         "' stroke-width='2'" + dashes[run.style.dash % 3] + "/><g fill='" + c + "'>" + markers[run.style.marker % 5] +
         "</g></svg>";
}

std::string comparison_tables(const std::vector<Run>& runs) {
  std::vector<const Run*> replay, bench;
  for (const Run& r : runs) (r.replay ? replay : bench).push_back(&r);
  std::string out;
  if (!replay.empty()) out += "<h3>Replay runs</h3>\n" + shared_line(replay, "replay runs") + replay_table(replay);
  if (!bench.empty()) out += "<h3>Bench runs</h3>\n" + shared_line(bench, "bench runs") + bench_table(bench);
  return out;
}

std::string input_details(const std::vector<ReportInput>& inputs) {
  std::ostringstream d;
  d << "<details><summary>Input files (" << inputs.size() << ")</summary><ul>";
  for (const ReportInput& in : inputs) {
    const json& j = in.data;
    d << "<li><code>" << html_escape(in.file) << "</code>: ";
    if (j.value("kind", "") == "replay") {
      const json& t = j.contains("trace") ? j["trace"] : json::object();
      const json& o = j.contains("options") ? j["options"] : json::object();
      d << "replay of trace " << html_escape(t.value("name", "?")) << " (" << html_escape(t.value("format", "?"))
        << "): " << t.value("requests", 0) << " requests replayed of " << t.value("rows", 0) << " rows, "
        << t.value("dropped", 0) << " dropped (empty), " << t.value("clamped", 0) << " clamped to the context limit";
      if (t.value("prefix_hit_ratio", 0.0) > 0) d << ", shared-prefix tokens " << fixed(100 * t.value("prefix_hit_ratio", 0.0), 1) << "%";
      d << "; model " << html_escape(o.value("preset", "?")) << ", " << o.value("layers", 0) << " layers, speed x"
        << o.value("speed", 1.0) << "; device " << html_escape(j.value("device_name", "?")) << ", "
        << html_escape(j.value("date", "?")) << ", commit " << html_escape(j.value("commit", "?"));
    } else {
      d << "bench, phase " << html_escape(j.value("phase", "?")) << ", " << j["results"].size() << " results";
      const bool ceilings = j.contains("ceilings") && j["ceilings"].is_object() &&
                            (num(j["ceilings"], "cpu_read_bytes_per_s") > 0 || num(j["ceilings"], "gpu_read_bytes_per_s") > 0);
      d << (ceilings ? ", ceilings measured" : "");
    }
    d << "</li>";
  }
  d << "</ul></details>\n";
  return d.str();
}

}  // namespace attnkit::serving::report_impl
