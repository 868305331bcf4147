// The tool's exit codes and one-line errors: 0 on success, 1 on a failed check or library error,
// 2 on a bad flag or value.
#include <gtest/gtest.h>

#include "tool_runner.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using attnkit::testing::run_tool;
using Outcome = attnkit::testing::ToolRun;

TEST(Cli, BadFlagIsOneLineAndExitTwo) {
  const Outcome r = run_tool("check --bogus");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "attnkit: The following argument was not expected: --bogus (see --help)\n");
}

TEST(Cli, BadValueNamesTheFlag) {
  const Outcome r = run_tool("bench --phase sideways");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--phase: sideways not in {prefill,decode,mixed}"), std::string::npos) << r.output;
  EXPECT_EQ(run_tool("check --backend nope").status, 2);
  EXPECT_EQ(run_tool("bench --page-size 512").status, 2);
  EXPECT_EQ(run_tool("").status, 2);  // a subcommand is required
}

TEST(Cli, BenchTakesAnExplicitBatch) {
  const Outcome r = run_tool("bench --backend reference --phase decode --requests 30+1x2,60+1 --repeats 2 --warmup 0");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("requests 30+1x2,60+1"), std::string::npos) << r.output;
  const Outcome bad = run_tool("bench --requests 30-1");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("each item must be PREFIX+NEW or PREFIX+NEWxCOUNT"), std::string::npos) << bad.output;
}

TEST(Cli, HelpOnEverySubcommand) {
  for (const char* sub : {"list", "check", "bench"}) {
    const Outcome r = run_tool(std::string(sub) + " --help");
    EXPECT_EQ(r.status, 0) << sub;
    EXPECT_NE(r.output.find("--"), std::string::npos) << sub;
  }
}

TEST(Cli, ListAsJson) {
  const Outcome r = run_tool("list --json");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("\"name\": \"reference\""), std::string::npos) << r.output;
}

TEST(Cli, CheckPassesAndSaysSo) {
  const Outcome r = run_tool("check --backend reference --cases 2 --preset qwen3-0.6b");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 passed, 0 failed"), std::string::npos) << r.output;
}

TEST(Cli, BenchRunsAndReportsRates) {
  const Outcome r = run_tool("bench --backend reference --phase decode --batch 2 --kv-len 64 --repeats 3 --warmup 1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("B/s"), std::string::npos) << r.output;
}

// A memory-bound cpu result under --ceilings is compared with a probe pass read just before each
// of its timed calls: one pass a call, and the fraction is the median of the calls' ratios.
TEST(Cli, CeilingsPairAProbePassWithEachHostCall) {
  const std::string path = ::testing::TempDir() + "attnkit_bench_paired.json";
  const Outcome r = run_tool("bench --backend cpu --phase decode --batch 2 --kv-len 256 --repeats 3 --warmup 0 "
                             "--ceilings --json " + path);
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::remove(path.c_str());
  const nlohmann::json& res = j["results"][0];
  ASSERT_EQ(res["call_ms"].size(), 3u);
  ASSERT_EQ(res["read_before_call_bytes_per_s"].size(), 3u);
  for (const auto& rate : res["read_before_call_bytes_per_s"]) EXPECT_GT(rate.get<double>(), 1e8);
  EXPECT_GT(res["fraction_of_ceiling"].get<double>(), 0.0);
  EXPECT_GT(res["fraction_of_probe_before_run"].get<double>(), 0.0);
  EXPECT_NE(r.output.find("read beside"), std::string::npos) << r.output;
}

}  // namespace
