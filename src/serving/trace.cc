// load_trace: picks the parser, then drops empty rows, orders by arrival, caps, clamps and scales
// time. The parsers themselves: trace_formats.cc.
#include "serving/trace.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unordered_set>

#include "attnkit/error.h"

namespace attnkit::serving {

namespace {

std::string read_file(const std::string& path) {
  std::error_code ec;
  ATTNKIT_CHECK(!std::filesystem::is_directory(path, ec), "trace: path '", path,
                "' is a folder; expected a trace file (CSV or JSONL) or builtin");
  std::ifstream f(path, std::ios::binary);
  ATTNKIT_CHECK(f.good(), "trace: cannot open '", path, "'; expected a readable trace file (CSV or JSONL) or builtin");
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The sample's file name inside data/traces/ (see the README there for its source and licence).
constexpr const char* kBuiltinFile = "azure_llm_2023_conv_sample.csv";

}  // namespace

std::string builtin_trace_path() {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  if (const char* env = std::getenv("ATTNKIT_DATA_DIR")) roots.emplace_back(env);
#ifdef ATTNKIT_SOURCE_DATA_DIR
  roots.emplace_back(ATTNKIT_SOURCE_DATA_DIR);
#endif
  roots.emplace_back("data");  // a source tree whose binaries were built elsewhere
  for (const fs::path& root : roots) {
    const fs::path p = root / "traces" / kBuiltinFile;
    if (fs::exists(p)) return p.string();
  }
  throw Error(detail::concat("trace: the built-in sample data/traces/", kBuiltinFile,
                             " was not found; set ATTNKIT_DATA_DIR to the project's data/ folder"));
}

double prefix_hit_ratio(const std::vector<TraceRequest>& requests) {
  // Each prefix of k leading blocks is a chain hash of its ids; a request reuses its leading blocks
  // up to the first chain no earlier request had.
  std::unordered_set<uint64_t> seen;
  double hit = 0.0, total = 0.0;
  for (const TraceRequest& r : requests) {
    total += static_cast<double>(r.prompt_len);
    uint64_t h = 0x9E3779B97F4A7C15ull;
    bool matching = true;
    for (size_t b = 0; b < r.hash_ids.size(); ++b) {
      h = (h ^ static_cast<uint64_t>(r.hash_ids[b])) * 0x100000001B3ull + b;
      const bool had = !seen.insert(h).second;
      matching = matching && had;
      if (matching) {
        const int64_t start = static_cast<int64_t>(b) * kHashBlockTokens;
        hit += static_cast<double>(std::clamp<int64_t>(r.prompt_len - start, 0, kHashBlockTokens));
      }
    }
  }
  return total > 0 ? hit / total : 0.0;
}

Trace load_trace(const std::string& path_in, const TraceOptions& o) {
  ATTNKIT_CHECK(o.speed > 0, "trace: speed must be > 0, got ", o.speed);
  ATTNKIT_CHECK(o.rate > 0, "trace: rate must be > 0 requests/s, got ", o.rate);
  ATTNKIT_CHECK(o.max_requests >= 0, "trace: max_requests must be >= 0, got ", o.max_requests);
  ATTNKIT_CHECK(o.max_context == 0 || o.max_context >= 2, "trace: max_context must be 0 (none) or >= 2, got ",
                o.max_context);
  ATTNKIT_CHECK(o.min_context >= 0 && (o.max_context == 0 || o.min_context <= o.max_context),
                "trace: min_context must be >= 0 and at most max_context (", o.max_context, "), got ", o.min_context);
  const bool builtin = path_in.empty() || path_in == "builtin";
  const std::string path = builtin ? builtin_trace_path() : path_in;
  const std::string text = read_file(path);
  const std::string header = text.substr(0, text.find('\n'));
  ATTNKIT_CHECK(!text.empty(), "trace: file '", path, "' is empty; expected a trace file (CSV or JSONL)");

  Trace t;
  t.name = builtin ? "builtin (" + std::filesystem::path(path).filename().string() + ")"
                   : std::filesystem::path(path).filename().string();
  std::vector<TraceRequest> rows;
  if (ends_with(path, ".jsonl")) {
    t.format = "mooncake-jsonl";
    rows = parse_mooncake_jsonl(text, path);
  } else if (header.find("ContextTokens") != std::string::npos) {
    t.format = "azure-csv";
    rows = parse_azure_csv(text, path);
  } else if (header.find("Request tokens") != std::string::npos) {
    t.format = "burstgpt-csv";
    rows = parse_burstgpt_csv(text, path);
  } else if (header.find("num_prefill_tokens") != std::string::npos) {
    t.format = "length-stats-csv";
    t.has_arrivals = false;
    rows = parse_length_stats_csv(text, path);
  } else {
    throw Error(detail::concat("trace ", path, ": unknown format: expected .jsonl (Mooncake) or a CSV header with ",
                               "ContextTokens (Azure), Request tokens (BurstGPT) or num_prefill_tokens (length "
                               "statistics), got '", header, "'"));
  }
  t.rows = static_cast<int64_t>(rows.size());

  // Failed requests (BurstGPT keeps them, as 0/0 rows) have nothing to replay.
  std::erase_if(rows, [&](const TraceRequest& r) {
    const bool empty = r.prompt_len <= 0 || r.output_len <= 0;
    t.dropped += empty;
    return empty;
  });
  std::erase_if(rows, [&](const TraceRequest& r) {
    const bool shorter = r.prompt_len + r.output_len < o.min_context;
    t.shorter += shorter;
    return shorter;
  });
  if (!t.has_arrivals) {
    std::mt19937_64 rng(o.seed);
    std::exponential_distribution<double> gap(o.rate);
    double now = 0.0;
    for (TraceRequest& r : rows) {
      r.arrival_s = now;
      now += gap(rng);
    }
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  if (o.max_requests > 0 && static_cast<int64_t>(rows.size()) > o.max_requests) rows.resize(o.max_requests);
  const double t0 = rows.empty() ? 0.0 : rows.front().arrival_s;
  for (size_t i = 0; i < rows.size(); ++i) {
    TraceRequest& r = rows[i];
    r.id = static_cast<int64_t>(i);
    r.arrival_s = (r.arrival_s - t0) / o.speed;
    if (o.max_context > 0 && r.prompt_len + r.output_len > o.max_context) {
      ++t.clamped;
      r.output_len = std::min(r.output_len, o.max_context - 1);
      r.prompt_len = o.max_context - r.output_len;
      const size_t blocks = static_cast<size_t>((r.prompt_len + kHashBlockTokens - 1) / kHashBlockTokens);
      if (r.hash_ids.size() > blocks) r.hash_ids.resize(blocks);
    }
  }
  t.requests = std::move(rows);
  t.prefix_hit_ratio = prefix_hit_ratio(t.requests);
  return t;
}

}  // namespace attnkit::serving
