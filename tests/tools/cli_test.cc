// The tool's exit codes and one-line errors: 0 on success, 1 on a failed check or library error,
// 2 on a bad flag or value.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Outcome {
  int status = -1;
  std::string output;
};

Outcome invoke(const std::string& args) {
  Outcome r;
  const std::string cmd = std::string(ATTNKIT_TOOL_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

TEST(Cli, BadFlagIsOneLineAndExitTwo) {
  const Outcome r = invoke("check --bogus");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "attnkit: The following argument was not expected: --bogus (see --help)\n");
}

TEST(Cli, BadValueNamesTheFlag) {
  const Outcome r = invoke("bench --phase sideways");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--phase: sideways not in {prefill,decode,mixed}"), std::string::npos) << r.output;
  EXPECT_EQ(invoke("check --backend nope").status, 2);
  EXPECT_EQ(invoke("bench --page-size 512").status, 2);
  EXPECT_EQ(invoke("").status, 2);  // a subcommand is required
}

TEST(Cli, HelpOnEverySubcommand) {
  for (const char* sub : {"list", "check", "bench"}) {
    const Outcome r = invoke(std::string(sub) + " --help");
    EXPECT_EQ(r.status, 0) << sub;
    EXPECT_NE(r.output.find("--"), std::string::npos) << sub;
  }
}

TEST(Cli, ListAsJson) {
  const Outcome r = invoke("list --json");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("\"name\": \"reference\""), std::string::npos) << r.output;
}

TEST(Cli, CheckPassesAndSaysSo) {
  const Outcome r = invoke("check --backend reference --cases 2 --preset qwen3-0.6b");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 passed, 0 failed"), std::string::npos) << r.output;
}

TEST(Cli, BenchRunsAndReportsRates) {
  const Outcome r = invoke("bench --backend reference --phase decode --batch 2 --kv-len 64 --repeats 3 --warmup 1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("B/s"), std::string::npos) << r.output;
}

}  // namespace
