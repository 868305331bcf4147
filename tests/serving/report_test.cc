// The HTML report: built from a replay result and a bench result, self-contained (no script, no
// link to fetch), with one inline SVG per plot when gnuplot is installed; and, when chromium is
// installed, rendered headless to prove the page opens and draws its plots.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>

#include "report_inputs.h"
#include "serving/replay.h"
#include "serving/replay_json.h"
#include "serving/report.h"
#include "serving/tiny_model.h"

namespace attnkit::serving {
namespace {

nlohmann::json small_replay() {
  ReplayOptions o;
  o.backend = "reference";
  o.model = testing::tiny_model(1);
  o.dtype = o.kv_dtype = DType::f32;
  o.page_size = 4;
  o.kv_pages = 256;
  o.scheduler = {.max_batch_size = 16, .token_budget = 64, .watermark_pages = 1};
  Trace t;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 60; ++i) {
    t.requests.push_back({.id = i, .arrival_s = i * 0.001, .prompt_len = 1 + static_cast<int64_t>(rng() % 30),
                          .output_len = 1 + static_cast<int64_t>(rng() % 10), .hash_ids = {}});
  }
  const ReplayResult r = run_replay(t, o);
  return {{"kind", "replay"}, {"trace", trace_json(t)}, {"options", {{"preset", "tiny"}, {"layers", 1}}},
          {"runs", nlohmann::json::array({run_json(r)})}};
}

nlohmann::json small_bench() {
  return nlohmann::json::parse(R"({"phase": "decode", "ceilings": {}, "results": [
    {"backend": "cpu", "workload": "llama3-8b decode 4 x 2048", "skipped": "", "median_ms": 1.5,
     "tokens_per_s": 2666, "workspace_bytes": 4096, "fraction_of_ceiling": 0.42},
    {"backend": "reference", "workload": "llama3-8b decode 4 x 2048", "skipped": "", "median_ms": 90.0,
     "tokens_per_s": 44, "workspace_bytes": 0, "fraction_of_ceiling": 0.01}]})");
}

std::string page() { return build_report({{"replay.json", small_replay()}, {"bench.json", small_bench()}}, "test"); }

TEST(Report, SelfContainedWithTables) {
  const std::string html = page();
  EXPECT_NE(html.find("<table"), std::string::npos);
  EXPECT_NE(html.find("reference"), std::string::npos);
  EXPECT_NE(html.find("decode 4 x 2048"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // Nothing to fetch: src= and href= only point inside the page (SVG namespaces are names, not fetches).
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)\s*=\s*['"](?!#))")));
}

TEST(Report, OneSvgPerPlotWhenGnuplotIsInstalled) {
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot is not installed";
  const std::string html = page();
  size_t svgs = 0;
  for (size_t at = html.find("<figure class=\"plot"); at != std::string::npos; at = html.find("<figure class=\"plot", at + 1)) ++svgs;
  // latency of decode steps and of steps with prefill, ceiling, TTFT, TPOT, memory, step time; the
  // replay's bandwidth plot needs ceilings for its device (the bench file here has none).
  EXPECT_EQ(svgs, 7u);
  EXPECT_EQ(html.find("<?xml"), std::string::npos);
}

TEST(Report, TwentyFourRunsTwentyFourColours) {
  std::set<std::string> colors, looks;
  for (int i = 0; i < kDistinctColors; ++i) colors.insert(run_style(i).color);
  EXPECT_EQ(colors.size(), static_cast<size_t>(kDistinctColors));
  // Past the palette, colour, marker and dash together still tell 72 runs apart.
  for (int i = 0; i < 3 * kDistinctColors; ++i) {
    const RunStyle s = run_style(i);
    looks.insert(s.color + "/" + std::to_string(s.marker) + "/" + std::to_string(s.dash));
  }
  EXPECT_EQ(looks.size(), static_cast<size_t>(3 * kDistinctColors));
}

// A skipped run has a row saying why, and no place in the plots.
TEST(Report, SkippedRunsInTheTableOnly) {
  nlohmann::json doc = testing::synthetic_replay({{"cpu"}, "t", "llama3-8b", "abc1234"}, 1);
  doc["runs"].push_back({{"label", "flashinfer"}, {"device", "cuda"}, {"skipped", "no CUDA device"}});
  const std::string html = build_report({{"r.json", doc}}, "t");
  EXPECT_NE(html.find("skipped: no CUDA device"), std::string::npos);
  EXPECT_EQ(html.find("<title>flashinfer</title>"), std::string::npos);
}

TEST(Report, RejectsAnUnknownFile) {
  EXPECT_THROW(build_report({{"x.json", nlohmann::json{{"something", 1}}}}, "t"), Error);
}

// Renders the page in headless chromium (no network) and reads back the DOM it built.
TEST(Report, RendersInHeadlessChromium) {
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) GTEST_SKIP() << "chromium is not installed";
  if (!gnuplot_available()) GTEST_SKIP() << "gnuplot is not installed";
  const std::filesystem::path dir = ::testing::TempDir();
  const std::filesystem::path html = dir / "attnkit_report_render.html", dom = dir / "attnkit_report_dom.html";
  std::ofstream(html) << page();
  const std::string cmd = "timeout 60 chromium --headless --no-sandbox --disable-gpu --no-first-run "
                          "--disable-extensions --dump-dom 'file://" + html.string() + "' >'" + dom.string() +
                          "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(dom);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<title>test</title>"), std::string::npos);
  size_t svgs = 0;
  for (size_t at = text.find("<figure class=\"plot"); at != std::string::npos; at = text.find("<figure class=\"plot", at + 1)) ++svgs;
  EXPECT_EQ(svgs, 7u);
}

}  // namespace
}  // namespace attnkit::serving
