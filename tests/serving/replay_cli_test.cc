// `attnkit replay` and `attnkit report` from the command line: usage errors exit 2 naming the flag,
// a short replay writes JSON that the report turns into a page.
#include <gtest/gtest.h>

#include "tool_runner.h"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using attnkit::testing::run_tool;
using Outcome = attnkit::testing::ToolRun;

TEST(ReplayCli, UsageErrorsNameTheFlag) {
  Outcome r = run_tool("replay --backend nope");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--backend: nope not in {"), std::string::npos) << r.output;
  r = run_tool("replay --prefill-backend reference");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--prefill-backend requires --decode-backend"), std::string::npos) << r.output;
  r = run_tool("replay --speed 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "attnkit: --speed: must be > 0, got 0 (see --help)\n");
  r = run_tool("replay --trace /nonexistent.csv --backend reference");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--trace: no file '/nonexistent.csv'; expected a trace file or builtin"), std::string::npos)
      << r.output;
  r = run_tool("replay --trace " + ::testing::TempDir());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("is a folder; expected a trace file or builtin"), std::string::npos) << r.output;
  EXPECT_EQ(run_tool("report").status, 2);  // at least one result file
  EXPECT_EQ(run_tool("replay --help").status, 0);
  EXPECT_EQ(run_tool("report --help").status, 0);
}

TEST(ReplayCli, ReplayThenReport) {
  const std::string json = ::testing::TempDir() + "attnkit_replay_cli.json";
  const std::string html = ::testing::TempDir() + "attnkit_replay_cli.html";
  const Outcome r = run_tool("replay --backend reference,cpu --prefill-backend reference --decode-backend cpu "
                           "--preset qwen3-0.6b --layers 1 --max-requests 6 --max-context 96 --speed 100 --verify "
                           "--no-progress --json " + json);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("no KV page leaked"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("reference+cpu"), std::string::npos) << r.output;
  std::ifstream f(json);
  const nlohmann::json doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc["kind"], "replay");
  EXPECT_EQ(doc["runs"].size(), 3u);
  EXPECT_EQ(doc["runs"][0]["summary"]["requests"], 6);
  const Outcome rep = run_tool("report " + json + " -o " + html);
  ASSERT_EQ(rep.status, 0) << rep.output;
  EXPECT_NE(rep.output.find(" KiB, 1 result file)"), std::string::npos) << rep.output;
  std::ifstream page(html);
  const std::string text((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<!DOCTYPE html>"), std::string::npos);
}

// Into a pipe, each line comes out when it is printed (the header before the first progress line,
// not all at exit), and progress comes as plain lines, not a bar. With only CPU backends, the
// default is one layer of the preset.
TEST(ReplayCli, LinesComeAsTheyArePrintedAndProgressAsLines) {
  const Outcome r = run_tool("replay --backend cpu --max-requests 3 --max-context 64 --speed 100");
  ASSERT_EQ(r.status, 0) << r.output;
  const size_t header = r.output.find("trace builtin");
  const size_t progress = r.output.find("cpu: 0/3 requests finished");
  ASSERT_NE(header, std::string::npos) << r.output;
  ASSERT_NE(progress, std::string::npos) << r.output;
  EXPECT_LT(header, progress) << r.output;
  EXPECT_NE(r.output.find("cpu: 3/3 requests finished"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[#"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model llama3-8b x 1 layer,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("only CPU backends run, so by default: 1 of 32 layers"), std::string::npos) << r.output;
}

// --cp 2: two ranks in this process, each holding a share of every request, checked against
// reference over the whole history; the table names the group and each rank's peak KV.
TEST(ReplayCli, ContextParallelRanksAndTheirMemory) {
  const std::string json = ::testing::TempDir() + "attnkit_replay_cp.json";
  const Outcome r = run_tool("replay --backend cpu --cp 2 --cp-share contiguous --cp-pages-per-run 4 --preset "
                             "qwen3-0.6b --layers 1 --max-requests 6 --max-context 300 --speed 100 --verify "
                             "--verify-every 2 --no-progress --json " + json);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("context parallel: 2 ranks in this process"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu (cp 2): peak KV a rank "), std::string::npos) << r.output;
  std::ifstream f(json);
  const nlohmann::json doc = nlohmann::json::parse(f);
  EXPECT_EQ(doc["options"]["cp_ranks"], 2);
  EXPECT_EQ(doc["runs"][0]["rank_peak_kv_bytes"].size(), 2u);
  EXPECT_EQ(run_tool("replay --cp 0").status, 2);
  EXPECT_EQ(run_tool("replay --cp-share diagonal").status, 2);
}

}  // namespace
