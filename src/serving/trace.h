// Request traces for `attnkit replay`: one request = arrival time, prompt and output lengths, and
// (Mooncake) prefix block hashes. The parsers for each file format live in trace_formats.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnkit::serving {

struct TraceRequest {
  int64_t id = 0;                 // row order in the file, from 0
  double arrival_s = 0.0;         // seconds after the first request of the file
  int64_t prompt_len = 0;         // input tokens (>= 1)
  int64_t output_len = 0;         // tokens to generate (>= 1)
  std::vector<int64_t> hash_ids;  // Mooncake: one id per block of kHashBlockTokens prompt tokens; else empty
};

// Mooncake's hash_ids name blocks of this many prompt tokens (FAST'25 release README).
inline constexpr int64_t kHashBlockTokens = 512;

struct Trace {
  std::string name;     // file name, or "builtin"
  std::string format;   // "azure-csv", "burstgpt-csv", "length-stats-csv", "mooncake-jsonl"
  bool has_arrivals = true;  // false: lengths only, arrivals drawn from a Poisson process
  std::vector<TraceRequest> requests;  // sorted by arrival
  // What loading did to the file's rows (reported so a result says what it replayed).
  int64_t rows = 0;          // data rows read
  int64_t dropped = 0;       // rows with no prompt or no output (failed requests in BurstGPT)
  int64_t shorter = 0;       // rows below TraceOptions::min_context, left out
  int64_t clamped = 0;       // requests shortened to fit max_context
  double prefix_hit_ratio = 0.0;  // Mooncake: prompt tokens whose leading blocks an earlier request shared
};

struct TraceOptions {
  int64_t max_requests = 0;   // 0: all rows; else the first N (after dropping empty rows)
  int64_t max_context = 0;    // 0: no limit; else prompt_len + output_len <= max_context (prompt cut first)
  int64_t min_context = 0;    // 0: all; else only rows of prompt_len + output_len >= min_context (long-context runs)
  double speed = 1.0;         // arrivals divided by this (2: twice as fast)
  double rate = 4.0;          // requests/s of the Poisson arrivals given to traces without times
  uint64_t seed = 1;          // for those arrivals
};

// Reads a trace file as it comes from its source: the format is recognised from the extension
// (.jsonl: Mooncake) and the CSV header (Azure 2023, BurstGPT, ShareGPT/arXiv length statistics).
// `path` "builtin" (or empty) is the sample shipped in data/traces/. Throws attnkit::Error naming
// the file, the line and the field on a malformed row.
Trace load_trace(const std::string& path, const TraceOptions& options = {});

// Where the built-in sample lives (searched: $ATTNKIT_DATA_DIR, the source tree, ./data).
std::string builtin_trace_path();

// The parsers, one a format; each returns the rows as they are (times from 0, unsorted allowed).
std::vector<TraceRequest> parse_azure_csv(const std::string& text, const std::string& file);
std::vector<TraceRequest> parse_burstgpt_csv(const std::string& text, const std::string& file);
std::vector<TraceRequest> parse_length_stats_csv(const std::string& text, const std::string& file);
std::vector<TraceRequest> parse_mooncake_jsonl(const std::string& text, const std::string& file);

// Fraction of prompt tokens covered by leading hash blocks that an earlier request already had
// (what an unlimited prefix cache would reuse); 0 for traces without hash_ids.
double prefix_hit_ratio(const std::vector<TraceRequest>& requests);

}  // namespace attnkit::serving
