// The trace file formats, read as each source publishes them: Azure LLM 2023 CSV, BurstGPT CSV,
// ShareGPT/arXiv length-statistics CSV and Mooncake JSONL. Sorting, clamping and caps: trace.cc.
#include <charconv>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include <nlohmann/json.hpp>

#include "attnkit/error.h"
#include "serving/trace.h"

namespace attnkit::serving {

namespace {

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = line.find(sep, start);
    out.push_back(line.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

// Calls `row(fields, line_number)` for every non-empty data line after the header.
template <typename Row>
void for_each_row(const std::string& text, const std::string& file, size_t min_fields, Row row) {
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1 || trim(line).empty()) continue;
    std::vector<std::string_view> fields = split(trim(line), ',');
    ATTNKIT_CHECK(fields.size() >= min_fields, "trace ", file, ":", line_no, ": expected at least ", min_fields,
                  " comma-separated fields, got ", fields.size());
    for (auto& f : fields) f = trim(f);
    row(fields, line_no);
  }
}

int64_t to_int(std::string_view s, const std::string& file, int64_t line, const char* field) {
  // Length columns are integers, but tolerate "123.0".
  const std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  ATTNKIT_CHECK(!text.empty() && end == text.c_str() + text.size() && v >= 0, "trace ", file, ":", line, ": ", field,
                " must be a non-negative number, got '", text, "'");
  return static_cast<int64_t>(v);
}

double to_double(std::string_view s, const std::string& file, int64_t line, const char* field) {
  const std::string text(s);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  ATTNKIT_CHECK(!text.empty() && end == text.c_str() + text.size(), "trace ", file, ":", line, ": ", field,
                " must be a number, got '", text, "'");
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// "2023-11-16 18:15:46.6805900" (no time zone: only differences matter) -> seconds.
double parse_timestamp(std::string_view s, const std::string& file, int64_t line) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0;
  double sec = 0.0;
  const std::string text(s);
  const int n = std::sscanf(text.c_str(), "%d-%d-%d %d:%d:%lf", &y, &mo, &d, &h, &mi, &sec);
  ATTNKIT_CHECK(n == 6, "trace ", file, ":", line, ": TIMESTAMP must look like 2023-11-16 18:15:46.6805900, got '",
                text, "'");
  return static_cast<double>(days_from_civil(y, mo, d)) * 86400.0 + h * 3600.0 + mi * 60.0 + sec;
}

}  // namespace

// TIMESTAMP,ContextTokens,GeneratedTokens
std::vector<TraceRequest> parse_azure_csv(const std::string& text, const std::string& file) {
  std::vector<TraceRequest> out;
  for_each_row(text, file, 3, [&](const std::vector<std::string_view>& f, int64_t line) {
    out.push_back({.id = static_cast<int64_t>(out.size()),
                   .arrival_s = parse_timestamp(f[0], file, line),
                   .prompt_len = to_int(f[1], file, line, "ContextTokens"),
                   .output_len = to_int(f[2], file, line, "GeneratedTokens"),
                   .hash_ids = {}});
  });
  return out;
}

// Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type (Timestamp in seconds)
std::vector<TraceRequest> parse_burstgpt_csv(const std::string& text, const std::string& file) {
  std::vector<TraceRequest> out;
  for_each_row(text, file, 4, [&](const std::vector<std::string_view>& f, int64_t line) {
    out.push_back({.id = static_cast<int64_t>(out.size()),
                   .arrival_s = to_double(f[0], file, line, "Timestamp"),
                   .prompt_len = to_int(f[2], file, line, "Request tokens"),
                   .output_len = to_int(f[3], file, line, "Response tokens"),
                   .hash_ids = {}});
  });
  return out;
}

// num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio (no arrival times)
std::vector<TraceRequest> parse_length_stats_csv(const std::string& text, const std::string& file) {
  std::vector<TraceRequest> out;
  for_each_row(text, file, 2, [&](const std::vector<std::string_view>& f, int64_t line) {
    out.push_back({.id = static_cast<int64_t>(out.size()),
                   .arrival_s = 0.0,
                   .prompt_len = to_int(f[0], file, line, "num_prefill_tokens"),
                   .output_len = to_int(f[1], file, line, "num_decode_tokens"),
                   .hash_ids = {}});
  });
  return out;
}

// {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]} one a line
std::vector<TraceRequest> parse_mooncake_jsonl(const std::string& text, const std::string& file) {
  std::vector<TraceRequest> out;
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (trim(line).empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(detail::concat("trace ", file, ":", line_no, ": not a JSON object: ", e.what()));
    }
    for (const char* key : {"timestamp", "input_length", "output_length"}) {
      ATTNKIT_CHECK(j.contains(key) && j[key].is_number(), "trace ", file, ":", line_no, ": ", key,
                    " must be a number");
    }
    TraceRequest r;
    r.id = static_cast<int64_t>(out.size());
    r.arrival_s = j["timestamp"].get<double>() / 1000.0;
    r.prompt_len = j["input_length"].get<int64_t>();
    r.output_len = j["output_length"].get<int64_t>();
    if (j.contains("hash_ids")) {
      ATTNKIT_CHECK(j["hash_ids"].is_array(), "trace ", file, ":", line_no, ": hash_ids must be a list");
      r.hash_ids = j["hash_ids"].get<std::vector<int64_t>>();
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace attnkit::serving
