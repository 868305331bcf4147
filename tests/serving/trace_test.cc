// Trace parsing: every source format as published, the built-in sample, and what loading does
// (drop empty rows, order, cap, clamp, scale time, Poisson arrivals, prefix sharing).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "attnkit/error.h"
#include "serving/trace.h"

namespace attnkit::serving {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Trace, AzureCsvTimesAreSecondsFromTheFirst) {
  const auto rows = parse_azure_csv(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\n"
      "2023-11-17 00:00:00.0000000,5,6\n",
      "azure.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].prompt_len, 374);
  EXPECT_EQ(rows[1].output_len, 109);
  EXPECT_NEAR(rows[1].arrival_s - rows[0].arrival_s, 4.314579, 1e-6);
  EXPECT_NEAR(rows[2].arrival_s - rows[0].arrival_s, 5 * 3600 + 44 * 60 + 13.31941, 1e-4);  // across midnight
}

TEST(Trace, BurstGptDropsFailedRows) {
  const std::string path = write_temp("burst.csv",
                                      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                      "5,ChatGPT,472,18,490,Conversation log\n"
                                      "7,GPT-4,0,0,0,Conversation log\n"
                                      "45,ChatGPT,1087,230,1317,Conversation log\n");
  const Trace t = load_trace(path);
  EXPECT_EQ(t.format, "burstgpt-csv");
  EXPECT_EQ(t.rows, 3);
  EXPECT_EQ(t.dropped, 1);
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t.requests[0].arrival_s, 0.0);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 40.0);
}

TEST(Trace, LengthStatsGetPoissonArrivals) {
  const std::string path = write_temp("stats.csv",
                                      "num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                                      "74,918,992,0.08\n290,905,1195,0.32\n10,5,15,2\n");
  TraceOptions o;
  o.rate = 2.0;
  const Trace t = load_trace(path, o);
  EXPECT_FALSE(t.has_arrivals);
  ASSERT_EQ(t.requests.size(), 3u);
  EXPECT_EQ(t.requests[0].arrival_s, 0.0);
  EXPECT_GT(t.requests[2].arrival_s, t.requests[1].arrival_s);
  EXPECT_EQ(t.requests[1].prompt_len, 290);
}

TEST(Trace, MooncakeHashIdsAndPrefixSharing) {
  const std::string path = write_temp("mooncake.jsonl",
                                      "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
                                      "{\"timestamp\": 1500, \"input_length\": 1100, \"output_length\": 3, \"hash_ids\": [0, 1, 2]}\n");
  const Trace t = load_trace(path);
  EXPECT_EQ(t.format, "mooncake-jsonl");
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 1.5);
  EXPECT_EQ(t.requests[1].hash_ids.size(), 3u);
  // The second request reuses both 512-token blocks of the first: 1024 of 2124 prompt tokens.
  EXPECT_NEAR(t.prefix_hit_ratio, 1024.0 / 2124.0, 1e-12);
}

TEST(Trace, CapClampAndSpeed) {
  TraceOptions o;
  o.max_requests = 2;
  o.max_context = 400;
  o.speed = 2.0;
  const std::string path = write_temp("azure2.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:00:10.0,1000,100\n"
                                      "2023-11-16 18:00:00.0,300,50\n"
                                      "2023-11-16 18:00:20.0,10,10\n");
  const Trace t = load_trace(path, o);
  ASSERT_EQ(t.requests.size(), 2u);  // the two earliest, in arrival order
  EXPECT_EQ(t.requests[0].prompt_len, 300);
  EXPECT_EQ(t.requests[1].prompt_len, 300);  // 1000 + 100 clamped to 400: the prompt is cut
  EXPECT_EQ(t.requests[1].output_len, 100);
  EXPECT_EQ(t.clamped, 1);
  EXPECT_DOUBLE_EQ(t.requests[1].arrival_s, 5.0);
}

// --min-context keeps the long requests only (before --max-requests counts them), times from the
// first one kept.
TEST(Trace, MinContextKeepsTheLongRequests) {
  TraceOptions o;
  o.min_context = 400;
  o.max_requests = 1;
  const std::string path = write_temp("azure3.csv",
                                      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:00:00.0,300,50\n"
                                      "2023-11-16 18:00:10.0,1000,100\n"
                                      "2023-11-16 18:00:20.0,390,10\n");
  const Trace t = load_trace(path, o);
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].prompt_len, 1000);
  EXPECT_DOUBLE_EQ(t.requests[0].arrival_s, 0.0);
  EXPECT_EQ(t.shorter, 1);  // 390 + 10 = 400 is kept, 300 + 50 is not
  o.max_requests = 0;
  EXPECT_EQ(load_trace(path, o).requests.size(), 2u);
  o.max_context = 300;
  EXPECT_THROW(load_trace(path, o), Error);  // nothing could be both
}

TEST(Trace, BuiltinSampleLoads) {
  const Trace t = load_trace("builtin");
  EXPECT_EQ(t.format, "azure-csv");
  EXPECT_EQ(t.requests.size(), 1000u);
  EXPECT_EQ(t.dropped, 0);
  for (const TraceRequest& r : t.requests) {
    EXPECT_GE(r.prompt_len, 1);
    EXPECT_GE(r.output_len, 1);
  }
}

TEST(Trace, ErrorsNameTheFileLineAndField) {
  try {
    parse_azure_csv("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,abc,3\n", "x.csv");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "trace x.csv:2: ContextTokens must be a non-negative number, got 'abc'");
  }
  const std::string path = write_temp("unknown.csv", "a,b,c\n1,2,3\n");
  EXPECT_THROW(load_trace(path), Error);
  EXPECT_THROW(load_trace("/nonexistent/trace.csv"), Error);
}

// A folder or an empty file is said as such, not as a format with an empty header.
TEST(Trace, AFolderOrAnEmptyFileIsSaidAsSuch) {
  auto message = [](const std::string& path) {
    try {
      load_trace(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string folder = ::testing::TempDir();
  EXPECT_EQ(message(folder), "trace: path '" + folder + "' is a folder; expected a trace file (CSV or JSONL) or builtin");
  const std::string empty = write_temp("empty.csv", "");
  EXPECT_EQ(message(empty), "trace: file '" + empty + "' is empty; expected a trace file (CSV or JSONL)");
}

}  // namespace
}  // namespace attnkit::serving
