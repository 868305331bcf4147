// The report's run labels: the backend, then the fields that tell the runs apart, one set of fields
// for every run; never a file number.
#include <gtest/gtest.h>

#include "report_inputs.h"
#include "serving/report_runs.h"

namespace attnkit::serving {
namespace {

using report_impl::collect_runs;

std::vector<std::string> labels(const std::vector<ReportInput>& inputs) {
  std::vector<std::string> out;
  for (const report_impl::Run& r : collect_runs(inputs)) out.push_back(r.label);
  return out;
}

ReportInput replay(const std::string& file, const testing::ReplaySpec& spec) {
  return {file, testing::synthetic_replay(spec, 1)};
}

TEST(ReportLabels, OneRunIsItsBackend) {
  EXPECT_EQ(labels({replay("a.json", {{"cpu"}, "t", "llama3-8b", "abc1234"})}), std::vector<std::string>{"cpu"});
}

TEST(ReportLabels, TheFieldThatDiffers) {
  EXPECT_EQ(labels({replay("a.json", {{"cpu"}, "t", "llama3-8b", "abc1234"}),
                    replay("b.json", {{"cpu"}, "t", "llama3-8b", "def5678"})}),
            (std::vector<std::string>{"cpu \u00b7 @abc1234", "cpu \u00b7 @def5678"}));
  // Backends differ already: nothing added.
  EXPECT_EQ(labels({replay("a.json", {{"cpu", "reference"}, "t", "llama3-8b", "abc1234"})}),
            (std::vector<std::string>{"cpu", "reference"}));
}

TEST(ReportLabels, EveryRunNamesTheSameFields) {
  const std::vector<std::string> l = labels({replay("a.json", {{"cpu"}, "sharegpt", "llama3-8b", "abc1234"}),
                                             replay("b.json", {{"cpu"}, "sharegpt", "tiny", "abc1234"}),
                                             replay("c.json", {{"cpu"}, "azure", "tiny", "abc1234"}),
                                             replay("d.json", {{"reference"}, "azure", "tiny", "abc1234"})});
  EXPECT_EQ(l, (std::vector<std::string>{"cpu \u00b7 sharegpt \u00b7 llama3-8b", "cpu \u00b7 sharegpt \u00b7 tiny",
                                         "cpu \u00b7 azure \u00b7 tiny", "reference \u00b7 azure \u00b7 tiny"}));
}

TEST(ReportLabels, BuiltinTracesByTheirFile) {
  const std::vector<std::string> l =
      labels({replay("a.json", {{"cpu"}, "builtin (azure_llm_2023_conv_sample.csv)", "llama3-8b", "abc1234"}),
              replay("b.json", {{"cpu"}, "traces/mooncake.jsonl", "llama3-8b", "abc1234"})});
  EXPECT_EQ(l, (std::vector<std::string>{"cpu \u00b7 azure_llm_2023_conv_sample", "cpu \u00b7 mooncake"}));
}

TEST(ReportLabels, BenchRunsSayBench) {
  const std::vector<std::string> l =
      labels({replay("a.json", {{"cpu"}, "t", "llama3-8b", "abc1234"}),
              {"b.json", testing::synthetic_bench("decode", {"cpu", "reference"}, {{8, 4096}}, false)}});
  EXPECT_EQ(l, (std::vector<std::string>{"cpu", "cpu \u00b7 bench decode", "reference \u00b7 bench decode"}));
}

TEST(ReportLabels, TheSameFileTwiceIsCounted) {
  const ReportInput a = replay("a.json", {{"cpu"}, "t", "llama3-8b", "abc1234"});
  // The file's name tells them apart first; given under one name, they are counted.
  EXPECT_EQ(labels({a, replay("copy.json", {{"cpu"}, "t", "llama3-8b", "abc1234"})}),
            (std::vector<std::string>{"cpu \u00b7 a", "cpu \u00b7 copy"}));
  EXPECT_EQ(labels({a, a}), (std::vector<std::string>{"cpu (1 of 2)", "cpu (2 of 2)"}));
}

}  // namespace
}  // namespace attnkit::serving
