// The tool's exit codes and one-line errors: 0 on success, 1 on a failed check or library error,
// 2 on a bad flag or value.
#include <gtest/gtest.h>
#include <unistd.h>

#include "tool_runner.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnkit/cpu_target.h"
#include "attnkit/registry.h"
#include "attnkit/tensor.h"

namespace {

using attnkit::testing::run_tool;
using Outcome = attnkit::testing::ToolRun;

constexpr const char* kJitNotBuiltIn = "jit is not built in";

// Why the jit backend cannot run here (kJitNotBuiltIn where it is not registered); empty where it can.
std::string jit_why_unavailable() {
  const auto& all = attnkit::Registry::global().all();
  const auto jit = std::find_if(all.begin(), all.end(), [](const attnkit::BackendInfo& b) { return b.name == "jit"; });
  return jit == all.end() ? kJitNotBuiltIn : jit->why_unavailable();
}

TEST(Cli, BadFlagIsOneLineAndExitTwo) {
  const Outcome r = run_tool("check --bogus");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.output, "attnkit: unknown option '--bogus' of `check` (see --help)\n");
}

// A mistyped subcommand or option is named, with the nearest known word.
TEST(Cli, UnknownWordsAreNamedWithTheNearest) {
  Outcome r = run_tool("lst");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unknown subcommand 'lst'; did you mean 'list'?"), std::string::npos) << r.output;
  r = run_tool("--bogus");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("unknown option '--bogus' (a subcommand comes first: list, check"), std::string::npos)
      << r.output;
  r = run_tool("--backend cpu");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--backend is an option of check, bench, tune, replay: it comes after the subcommand"),
            std::string::npos)
      << r.output;
  r = run_tool("--backend cpu check");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--backend is an option of check: it comes after the subcommand (attnkit check --backend"),
            std::string::npos)
      << r.output;
  r = run_tool("check --backnd cpu");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("did you mean --backend?"), std::string::npos) << r.output;
  r = run_tool("");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("a subcommand is required: list, check, bench, tune, replay, report"), std::string::npos)
      << r.output;
}

// Every bad value exits 2 with one line naming the flag, the value and what was expected.
// The SIMD targets this CPU runs, as `--cpu-target` lists them.
std::string cpu_target_list() {
  std::string list;
  for (const std::string& t : attnkit::cpu_targets()) list += t + ",";
  return "{" + list + "best}";
}

TEST(Cli, BadValuesExitTwoInEverySubcommand) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench --cpu-target bogus", "--cpu-target: bogus not in " + cpu_target_list()},
      {"tune --phases foo", "--phases: foo not in {prefill,decode}"},
      {"tune --batches 0", "--batches: expected a whole number from 1 to 65536, got '0'"},
      {"tune --batches abc", "--batches: expected a whole number from 1 to 65536, got 'abc'"},
      {"tune --kv-lens -1", "--kv-lens: expected a whole number from 1 to 16777216, got '-1'"},
      {"check --seed -1", "--seed: expected a whole number >= 0, got '-1'"},
      {"replay --seed -1", "--seed: expected a whole number >= 0, got '-1'"},
      {"replay --speed 0", "--speed: must be > 0, got 0"},
      {"bench --max-seconds -1", "--max-seconds: must be > 0, got -1"},
      {"replay --kv-memory 0", "--kv-memory: must be > 0, got 0"},
      {"replay --kv-pages 1", "--kv-pages: expected a whole number from 2 to 2147483648, got '1'"},
      {"check --seed 1 --seed 2", "--seed was given 2 times; give it once"},
      {"bench --threads 0", "--threads: expected a whole number from 1 to 1024, got '0'"},
      {"bench --cpu-bf16-dot maybe", "--cpu-bf16-dot: maybe not in {true,false}"},
      {"bench --batch", "--batch needs a value (INT)"},
      {"bench --batch 2 --requests 3+1", "--batch and --requests cannot be given together"},
      {"replay --kv-pages 100 --kv-memory 1", "--kv-memory and --kv-pages cannot be given together"},
      {"replay --verify-max 3", "--verify-max requires --verify"},
      {"replay --max-context 1", "--max-context: expected 0 or a whole number from 2 to 1073741824, got '1'"},
      {"bench --requests 0+0", "--requests: each item must be PREFIX+NEW or PREFIX+NEWxCOUNT with PREFIX >= 0, "
                               "NEW >= 0, PREFIX+NEW >= 1 and COUNT >= 1, got '0+0'"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome r = run_tool(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_EQ(r.output, "attnkit: " + message + " (see --help)\n") << args;
  }
}

// A file that cannot be written is said before any work starts (exit 2), not after it.
TEST(Cli, OutputPathsAreCheckedBeforeTheWork) {
  const std::string bad = "/nonexistent/dir/x";
  for (const std::string& args :
       {"replay --json " + bad + ".json", "replay --report " + bad + ".html", "tune --out " + bad + ".json",
        "bench --json " + bad + ".json", "bench --decode-timeline " + bad + ".csv"}) {
    const Outcome r = run_tool(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("the folder '/nonexistent/dir' of '" + bad), std::string::npos) << args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << args << ": " << r.output;
  }
  const Outcome folder = run_tool("bench --json " + ::testing::TempDir());
  EXPECT_EQ(folder.status, 2);
  EXPECT_NE(folder.output.find("is a folder; expected a file name"), std::string::npos) << folder.output;
}

// A backend named on its own that cannot run here is an error with the reason; `all` skips it.
TEST(Cli, ANamedBackendThatCannotRunIsAnError) {
  const nlohmann::json list = nlohmann::json::parse(run_tool("list --json").output);
  std::string name, why;
  for (const auto& b : list["backends"]) {
    if (!b["available"].get<bool>()) {
      name = b["name"];
      why = b["why_unavailable"];
      break;
    }
  }
  if (name.empty()) GTEST_SKIP() << "every backend built here can run here";
  for (const std::string sub : {"check", "bench", "replay"}) {
    const Outcome r = run_tool(sub + " --backend " + name);
    EXPECT_EQ(r.status, 1) << sub << ": " << r.output;
    EXPECT_NE(r.output.find(sub + ": backend " + name + " cannot run here: " + why), std::string::npos)
        << sub << ": " << r.output;
  }
  const Outcome tune = run_tool("tune --backend " + name);
  EXPECT_EQ(tune.status, 1) << tune.output;
  // No driver, no GPU or an old driver, said as such (not the runtime's "insufficient driver").
  EXPECT_EQ(why.find("insufficient"), std::string::npos) << why;
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

TEST(Cli, HelpOnEverySubcommandShowsTheDefaults) {
  for (const char* sub : {"list", "check", "bench", "tune", "replay", "report"}) {
    const Outcome r = run_tool(std::string(sub) + " --help");
    EXPECT_EQ(r.status, 0) << sub;
    EXPECT_NE(r.output.find("Usage: attnkit " + std::string(sub)), std::string::npos) << r.output;
  }
  const std::vector<std::pair<std::string, std::string>> defaults = {
      {"check", "--cases INT:1..100000=8"}, {"check", "--seed UINT=1"},          {"bench", "--repeats INT:1..100000=20"},
      {"bench", "--page-size INT:1..256=16"}, {"replay", "--speed FLOAT:> 0=1"}, {"tune", "--batches INT:1..65536=[1,8]"},
      {"check", "--threads"},                 {"bench", "--threads"},            {"replay", "--threads"},
      {"tune", "--threads"}};
  for (const auto& [sub, text] : defaults) {
    EXPECT_NE(run_tool(sub + " --help").output.find(text), std::string::npos) << sub << ": " << text;
  }
  EXPECT_NE(run_tool("list --help").output.find("Features: extend ("), std::string::npos);
}

// Arrays throughout, and "any" said as such.
TEST(Cli, ListAsJson) {
  const Outcome r = run_tool("list --json");
  ASSERT_EQ(r.status, 0);
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_FALSE(j["backends"].empty());
  for (const auto& b : j["backends"]) {
    EXPECT_TRUE(b["q_dtypes"].is_array() && b["kv_dtypes"].is_array() && b["features"].is_array()) << b;
    for (const char* key : {"head_dims", "mla_dims"}) EXPECT_TRUE(b[key].is_array() || b[key] == "any") << b;
    EXPECT_TRUE(b["max_head_dim"].is_number() || b["max_head_dim"] == "any") << b;
  }
  EXPECT_EQ(j["backends"][0]["name"], "reference");
  EXPECT_EQ(j["backends"][0]["head_dims"], "any");
  const nlohmann::json& decode = j["auto"]["decode 8 x 4096"];
  EXPECT_TRUE(decode["backend"].is_string()) << decode;
  EXPECT_NE(decode["reason"].get<std::string>().find("chose " + decode["backend"].get<std::string>()), std::string::npos)
      << decode;
  EXPECT_TRUE(j["auto"]["table"].is_null()) << j["auto"];
}

// Why a backend cannot run or was skipped goes under the table, so no column is as wide as a reason.
TEST(Cli, TablesKeepReasonsOutOfTheColumns) {
  for (const char* args : {"list", "bench --backend all --batch 1 --kv-len 16 --repeats 1 --warmup 0"}) {
    const Outcome r = run_tool(args);
    ASSERT_EQ(r.status, 0) << r.output;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("  ") != std::string::npos) {
        EXPECT_LT(line.size(), 200u) << args << ": " << line;
      }
    }
  }
  EXPECT_EQ(run_tool("list").output.find("cpu (chose"), std::string::npos);
}

TEST(Cli, CheckPassesAndSaysSo) {
  const Outcome r = run_tool("check --backend reference --cases 2 --preset qwen3-0.6b");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 passed, 0 failed"), std::string::npos) << r.output;
  const Outcome one_thread = run_tool("check --backend cpu --cases 2 --preset qwen3-0.6b --threads 1");
  EXPECT_EQ(one_thread.status, 0) << one_thread.output;
  EXPECT_NE(one_thread.output.find("2 passed, 0 failed"), std::string::npos) << one_thread.output;
}

TEST(Cli, VariantsRunWhereABackendHasThemAndAreSkippedElsewhere) {
  const Outcome ref = run_tool("check --backend reference --cases 2 --preset qwen3-0.6b --score-mod "
                               "'score - 0.0625f * (q_pos - kv_pos)' --mask-mod 'kv_pos / 64 == q_pos / 64'");
  EXPECT_EQ(ref.status, 0) << ref.output;
  EXPECT_NE(ref.output.find("2 passed, 0 failed"), std::string::npos) << ref.output;
  const Outcome cpu = run_tool("check --backend cpu --cases 1 --preset qwen3-0.6b --mask-mod 'kv_pos < 8'");
  EXPECT_EQ(cpu.status, 0) << cpu.output;
  EXPECT_NE(cpu.output.find("SKIP (mask_mod is not supported ('kv_pos < 8'))"), std::string::npos) << cpu.output;
  const Outcome bad = run_tool("check --backend reference --cases 1 --mask-mod 'score > 0'");
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_NE(bad.output.find("mask_mod decides which keys are visible before any score exists"), std::string::npos)
      << bad.output;
}

TEST(Cli, SoftCapAppliesToEveryLayerAndMustBePositive) {
  const Outcome r = run_tool("check --backend cpu --cases 2 --preset qwen3-0.6b --soft-cap 30");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("2 passed, 0 failed"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("softcap"), std::string::npos) << r.output;
  const Outcome bad = run_tool("check --backend cpu --cases 1 --soft-cap -1");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--soft-cap"), std::string::npos) << bad.output;
}

TEST(Cli, JitShowsTheSourceItCompiles) {
  const Outcome r = run_tool("jit --show --preset qwen3-0.6b --page-size 64 --mask-mod 'kv_pos / 64 == q_pos / 64'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("#define HEAD_DIM_QK 128"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("#define GROUP 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("#define PAGE_SIZE 64"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("return ((kv_pos / 64) == (q_pos / 64));"), std::string::npos) << r.output;
  const Outcome tiled = run_tool("jit --show --preset qwen3-0.6b --tile 'n32 w4x1 m2 s3'");
  EXPECT_EQ(tiled.status, 0) << tiled.output;
  EXPECT_NE(tiled.output.find("#define M_TILES 2"), std::string::npos) << tiled.output;
  const Outcome bad_tile = run_tool("jit --show --preset qwen3-0.6b --tile 'n32 w4'");
  EXPECT_EQ(bad_tile.status, 1) << bad_tile.output;
  EXPECT_NE(bad_tile.output.find("jit: tile 'n32 w4' is not one"), std::string::npos) << bad_tile.output;
  // DeepSeek's latent: the tensor-core template in two passes of 256 columns; q and cache apart,
  // the warp-row kernel.
  const Outcome mla = run_tool("jit --show --preset deepseek-v3");
  EXPECT_EQ(mla.status, 0) << mla.output;
  EXPECT_NE(mla.output.find("mma_tile, rendered for head_dim 576/512, group 128"), std::string::npos) << mla.output;
  EXPECT_NE(mla.output.find("#define VO_PASSES 2"), std::string::npos) << mla.output;
  const Outcome mixed = run_tool("jit --show --preset deepseek-v3 --kv-dtype f16");
  EXPECT_EQ(mixed.status, 0) << mixed.output;
  EXPECT_NE(mixed.output.find("warp_row, rendered for head_dim 576/512"), std::string::npos) << mixed.output;
}

// `check --backend jit` on DeepSeek runs its random cases on the latent kernels, none skipped (a GPU's).
TEST(Cli, CheckRunsJitOnDeepSeeksLatent) {
  if (const std::string why = jit_why_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const Outcome r = run_tool("check --backend jit --preset deepseek-v3 --cases 6");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("6 passed, 0 failed\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("SKIP"), std::string::npos) << r.output;
}

TEST(Cli, WarmupCompilesOnceIntoTheDiskCacheWithoutAGpu) {
  const std::string dir = ::testing::TempDir() + "attnkit-warmup-" + std::to_string(::getpid());
  ::setenv("ATTNKIT_CACHE_DIR", dir.c_str(), 1);
  const std::string args = "warmup --preset qwen3-0.6b --arch sm_90 --page-sizes 16 --score-mod 'score * 0.5f'";
  const Outcome first = run_tool(args);
  if (first.output.find("without CUDA") != std::string::npos || first.output.find("NVRTC was not found") != std::string::npos) {
    ::unsetenv("ATTNKIT_CACHE_DIR");
    GTEST_SKIP() << first.output;
  }
  EXPECT_EQ(first.status, 0) << first.output;
  // Every tile the tuner may measure, decode- and prefill-shaped (6 and 5), and on sm_90 the wgmma
  // template's for prefill (4, compiled for sm_90a).
  EXPECT_NE(first.output.find("[1/15] mma_tile d128/128 g2 p16 bf16 kv bf16 n64 w1x4 m1 s4 score_mod (score * 0.5f) "
                              "for sm_90: compiled in"),
            std::string::npos) << first.output;
  EXPECT_NE(first.output.find("wgmma_tile d128/128 g2 p16 bf16 kv bf16 n128 w8x1 m1 s2 wgmma"), std::string::npos)
      << first.output;
  EXPECT_NE(first.output.find("15 compiled, 0 already on disk"), std::string::npos) << first.output;
  const Outcome second = run_tool(args);
  EXPECT_NE(second.output.find("0 compiled, 15 already on disk"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("cache: " + dir), std::string::npos) << second.output;
  ::unsetenv("ATTNKIT_CACHE_DIR");
  std::filesystem::remove_all(dir);
}

// warmup --tune runs the kernels: on a machine where jit cannot run it says why, before compiling;
// it tunes for this GPU, so it takes no --arch.
TEST(Cli, WarmupTuneNeedsAGpuAndNoArch) {
  const Outcome with_arch = run_tool("warmup --preset qwen3-0.6b --tune --arch sm_90");
  EXPECT_EQ(with_arch.status, 2) << with_arch.output;
  EXPECT_NE(with_arch.output.find("--arch and --tune cannot be given together"), std::string::npos) << with_arch.output;
  const std::string why = jit_why_unavailable();
  if (why.empty()) GTEST_SKIP() << "jit runs here: --tune would tune";
  if (why == kJitNotBuiltIn) GTEST_SKIP() << why;
  const Outcome r = run_tool("warmup --preset qwen3-0.6b --tune");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("warmup --tune: tuning runs the kernels on this machine's GPU: " + why), std::string::npos)
      << r.output;
}

TEST(Cli, BenchRunsAndReportsRates) {
  const Outcome r = run_tool("bench --backend reference --phase decode --batch 2 --kv-len 64 --repeats 3 --warmup 1");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("B/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bench: reference on llama3-8b decode 2 x 64 ...\n"), std::string::npos) << r.output;
}

// `check` runs the cpu kernels on every SIMD target this CPU runs, when asked for one, and says which.
TEST(Cli, CheckPassesOnEveryCpuTarget) {
  for (const std::string& target : attnkit::cpu_targets()) {
    const Outcome r = run_tool("check --backend cpu --cases 2 --preset qwen3-0.6b --cpu-target " + target);
    EXPECT_EQ(r.status, 0) << target << ": " << r.output;
    EXPECT_NE(r.output.find("cpu target: " + target + "\n"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("2 passed, 0 failed"), std::string::npos) << target << ": " << r.output;
  }
}

// A results file that is not JSON is a bad argument: exit 2, naming the file, before any page is written.
TEST(Cli, ReportRefusesAFileThatIsNotJson) {
  const std::string bad = ::testing::TempDir() + "attnkit_not_json.json";
  std::ofstream(bad) << "not json\n";
  const Outcome r = run_tool("report " + bad + " -o " + ::testing::TempDir() + "attnkit_not_json.html");
  std::remove(bad.c_str());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(bad + " is not JSON"), std::string::npos) << r.output;
}

// tune says each bucket as it starts, and leaves out `reference` unless it is named.
TEST(Cli, TuneSaysEachBucketAndLeavesOutTheReference) {
  const std::string path = ::testing::TempDir() + "attnkit_tune_cli.json";
  const Outcome r = run_tool("tune --phases decode --batches 1 --kv-lens 16 --repeats 1 --out " + path);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tune: cpu decode batch 1 kv_len 16 ..."), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("reference"), std::string::npos) << r.output;
  std::ifstream f(path);
  // One bucket a device with a backend to time: the CPU's, and the GPU's where there is one.
  EXPECT_EQ(nlohmann::json::parse(f)["entries"].size(), attnkit::cuda_available() ? 2u : 1u);
  std::remove(path.c_str());
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
  // Where the result came from, for the report's labels: the commit, the date and the device.
  EXPECT_FALSE(j["commit"].get<std::string>().empty());
  EXPECT_EQ(j["date"].get<std::string>().size(), 10u) << j["date"];
  EXPECT_FALSE(j["device_name"].get<std::string>().empty());
}

}  // namespace
