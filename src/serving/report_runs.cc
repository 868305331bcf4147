// collect_runs: the runs of replay and bench result files and their labels. A label is the backend
// and the fields that tell the runs apart (the same fields for every run), so that ten CPU runs
// read "cpu · sharegpt · @1a2b3c4", never "cpu [4]".
#include "serving/report_runs.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

namespace attnkit::serving::report_impl {

namespace {

using nlohmann::json;

std::string text(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return "";
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v.get<double>());
    return buf;
  }
  return v.dump();
}

Field field(std::string key, std::string value, const std::string& tag_prefix = "") {
  std::string tag = value.empty() ? "" : tag_prefix + value;
  return {std::move(key), std::move(value), std::move(tag)};
}

std::string file_stem(const std::string& path) { return std::filesystem::path(path).stem().string(); }

// A trace in a label: "builtin (azure_llm_2023_conv_sample.csv)" or "data/azure.csv" by the file's
// stem; the table keeps the whole name.
Field trace_field(const std::string& name) {
  std::string inner = name;
  if (inner.rfind("builtin (", 0) == 0 && inner.back() == ')') inner = inner.substr(9, inner.size() - 10);
  Field f = field("trace", name);
  if (!inner.empty()) f.tag = file_stem(inner);
  return f;
}

// The fields of a replay run, from its file's header and options.
std::vector<Field> replay_fields(const json& doc, const std::string& path) {
  const json& o = doc.contains("options") ? doc["options"] : json::object();
  const json& t = doc.contains("trace") ? doc["trace"] : json::object();
  std::string dtype = text(o, "dtype");
  const std::string kv = text(o, "kv_dtype");
  if (!kv.empty() && kv != dtype) dtype += (dtype.empty() ? "kv " : "/kv ") + kv;
  std::string commit = text(doc, "commit");
  if (commit == "?" || commit == "unknown") commit.clear();
  return {{"kind", "replay", ""},  // labels name bench runs; a run not so named is a replay
          trace_field(text(t, "name")),
          field("workload", ""),
          field("preset", text(o, "preset")),
          field("dtype", dtype),
          field("page_size", text(o, "page_size"), "page "),
          field("max_batch", text(o, "max_batch"), "batch "),
          field("token_budget", text(o, "token_budget"), "budget "),
          field("speed", text(o, "speed"), "speed x"),
          field("gemms", o.contains("gemms") ? (o.value("gemms", false) ? "on" : "off") : "", "GEMMs "),
          field("device", text(doc, "device_name")),
          field("commit", commit, "@"),
          field("date", text(doc, "date")),
          field("file", file_stem(path))};
}

// The fields of a bench run. Bench files carry the workload ("llama3-8b decode 8 x 4096": the
// preset and the shape) and the phase; the rest of what a replay file says they do not.
std::vector<Field> bench_fields(const json& doc, const std::vector<const json*>& results, const std::string& path) {
  static const std::regex preset_re(R"(^(\S+) (prefill|decode|mixed) (.*)$)");
  std::set<std::string> presets, shapes;
  for (const json* r : results) {
    const std::string wl = r->value("workload", "");
    std::smatch m;
    if (std::regex_match(wl, m, preset_re)) presets.insert(m[1]), shapes.insert(std::string(m[2]) + " " + m[3].str());
    else shapes.insert(wl);
  }
  auto one_or_count = [](const std::set<std::string>& s, const char* what) {
    if (s.size() == 1) return *s.begin();
    return s.empty() ? std::string() : std::to_string(s.size()) + " " + what;
  };
  return {field("kind", "bench " + doc.value("phase", std::string("?"))),
          field("trace", ""),
          field("workload", one_or_count(shapes, "workloads")),
          field("preset", one_or_count(presets, "presets")),
          field("dtype", ""),
          field("page_size", ""),
          field("max_batch", ""),
          field("token_budget", ""),
          field("speed", ""),
          field("gemms", ""),
          field("device", text(doc, "device_name")),
          field("commit", text(doc, "commit"), "@"),
          field("date", text(doc, "date")),
          field("file", file_stem(path))};
}

// One result of `attnkit bench --json`, or of bench/run_attnkit.py, which wraps the tool's result
// under "tool" beside the peers' fields.
const json& bench_result(const json& entry) { return entry.contains("tool") ? entry["tool"] : entry; }

size_t distinct(const std::vector<std::string>& labels) {
  return std::set<std::string>(labels.begin(), labels.end()).size();
}

// Labels say the backend and, for every run alike, the fields (in field order) that tell more runs
// apart than the fields before them did: one set of fields for the whole page.
void make_labels(std::vector<Run>& runs) {
  std::vector<std::string> labels;
  for (const Run& r : runs) labels.push_back(r.backend.empty() ? "?" : r.backend);
  for (size_t f = 0; f < field_headings().size() && distinct(labels) < runs.size(); ++f) {
    std::vector<std::string> more = labels;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!runs[i].fields[f].tag.empty()) more[i] += " \u00b7 " + runs[i].fields[f].tag;
    }
    if (distinct(more) > distinct(labels)) {
      labels = std::move(more);
      for (Run& r : runs) r.label_fields.push_back(r.fields[f].key);
    }
  }
  // Runs alike in every field (one file given twice): counted.
  std::map<std::string, int> seen, total;
  for (const std::string& l : labels) ++total[l];
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].label = labels[i];
    if (total[labels[i]] > 1) runs[i].label += " (" + std::to_string(++seen[labels[i]]) + " of " + std::to_string(total[labels[i]]) + ")";
  }
}

}  // namespace

const std::string& Run::field(const std::string& key) const {
  static const std::string none;
  for (const Field& f : fields) {
    if (f.key == key) return f.value;
  }
  return none;
}

const std::vector<std::pair<std::string, std::string>>& field_headings() {
  static const std::vector<std::pair<std::string, std::string>> h = {
      {"kind", "kind"},         {"trace", "trace"},       {"workload", "workload"},
      {"preset", "preset"},     {"dtype", "dtype"},       {"page_size", "page size"},
      {"max_batch", "max batch"}, {"token_budget", "token budget"}, {"speed", "speed"},
      {"gemms", "GEMMs"},       {"device", "device"},     {"commit", "commit"},
      {"date", "date"},         {"file", "file"}};
  return h;
}

std::vector<Run> collect_runs(const std::vector<ReportInput>& inputs) {
  std::vector<Run> runs;
  for (size_t f = 0; f < inputs.size(); ++f) {
    const json& doc = inputs[f].data;
    if (doc.value("kind", "") == "replay") {
      const std::vector<Field> fields = replay_fields(doc, inputs[f].file);
      for (const json& run : doc["runs"]) {
        Run r;
        r.file = f;
        r.run = &run;
        r.backend = run.value("label", "?");
        r.skipped = run.value("skipped", "");
        r.fields = fields;
        runs.push_back(std::move(r));
      }
      continue;
    }
    // Bench: one run per backend, in the order the file names them.
    std::vector<std::string> order;
    std::map<std::string, std::vector<const json*>> by_backend;
    for (const json& entry : doc["results"]) {
      const json& r = bench_result(entry);
      const std::string b = r.value("backend", "?");
      if (!by_backend.count(b)) order.push_back(b);
      by_backend[b].push_back(&r);
    }
    for (const std::string& b : order) {
      Run r;
      r.replay = false;
      r.file = f;
      r.backend = b;
      for (const json* res : by_backend[b]) {
        if (res->value("skipped", "").empty()) r.results.push_back(res);
        else if (r.skipped.empty()) r.skipped = res->value("skipped", "");
      }
      if (!r.results.empty()) r.skipped.clear();
      r.fields = bench_fields(doc, by_backend[b], inputs[f].file);
      runs.push_back(std::move(r));
    }
  }
  make_labels(runs);
  int drawn = 0;
  for (Run& r : runs) {
    if (r.skipped.empty()) r.style = run_style(drawn++);
  }
  return runs;
}

std::string shared_fields(const std::vector<const Run*>& runs) {
  if (runs.empty()) return "";
  std::string out;
  for (size_t f = 0; f < runs[0]->fields.size(); ++f) {
    const Field& first = runs[0]->fields[f];
    if (first.value.empty() || first.key == "file" || first.key == "kind") continue;
    const bool same = std::all_of(runs.begin(), runs.end(), [&](const Run* r) { return r->fields[f].value == first.value; });
    if (!same) continue;
    for (const auto& [key, heading] : field_headings()) {
      if (key == first.key) out += (out.empty() ? "" : ", ") + heading + " " + first.value;
    }
  }
  return out;
}

bool field_varies(const std::vector<const Run*>& runs, const std::string& key) {
  std::set<std::string> values;
  for (const Run* r : runs) values.insert(r->field(key));
  return values.size() > 1;
}

}  // namespace attnkit::serving::report_impl
