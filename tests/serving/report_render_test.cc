// The report with 1, 5 and 20 runs, laid out by headless chromium: a script added to a copy of the
// page measures what the browser drew (each plot's drawing area, the legend entries, every text's
// box) and writes it into the DOM, which chromium dumps. Skips without chromium or gnuplot. With
// ATTNKIT_REPORT_SCREENSHOTS=DIR set, also writes DIR/report-<runs>-runs.png.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "report_inputs.h"
#include "serving/report.h"

namespace attnkit::serving {
namespace {

using nlohmann::json;

constexpr const char* kMeasure = R"JS(<script>(function () {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const out = {figures: [], height: document.documentElement.scrollHeight, text: document.body.innerText};
  for (const f of document.querySelectorAll('figure.plot')) {
    const svg = f.querySelector('svg');
    const kind = ['bars', 'multiples'].find(k => f.classList.contains(k)) || 'lines';
    const fig = {kind: kind, title: f.querySelector('h3').textContent,
                 areas: [], legend: [], texts: []};
    for (const a of svg.querySelectorAll('.plot-area')) fig.areas.push(box(a));
    for (const g of svg.querySelectorAll('g[id*="gnuplot_plot_"]')) {
      const t = g.querySelector(':scope > title');
      if (!t || /^gnuplot_plot_/.test(t.textContent)) continue;
      const text = g.querySelector('text'), path = g.querySelector('path'), use = g.querySelector('use');
      fig.legend.push({title: t.textContent, text: text ? text.textContent : '', box: text ? box(text) : null,
                       look: (path ? path.getAttribute('stroke') + '|' + path.getAttribute('stroke-dasharray') : '') +
                             '|' + (use ? use.getAttribute('xlink:href') : '')});
    }
    for (const t of svg.querySelectorAll('text')) {
      if (t.textContent.trim()) fig.texts.push({s: t.textContent.trim(), box: box(t)});
    }
    out.figures.push(fig);
  }
  const pre = document.createElement('pre');
  pre.id = 'layout';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();</script>)JS";

bool have(const char* tool) { return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0; }

std::string chromium(const std::string& args, const std::filesystem::path& html) {
  return "timeout 90 chromium --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions "
         "--hide-scrollbars " + args + " 'file://" + html.string() + "'";
}

std::string unescape(std::string s) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""},
                                 {"&amp;", "&"}}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  }
  return s;
}

// What chromium drew for the page of `runs` runs.
json layout(int runs, const std::string& html_text) {
  const std::filesystem::path dir = ::testing::TempDir();
  const std::filesystem::path html = dir / ("report_" + std::to_string(runs) + ".html");
  const std::filesystem::path measured = dir / ("report_" + std::to_string(runs) + "_measured.html");
  const std::filesystem::path dom = dir / ("report_" + std::to_string(runs) + "_dom.html");
  std::ofstream(html) << html_text;
  std::string with_script = html_text;
  with_script.insert(with_script.rfind("</body>"), kMeasure);
  std::ofstream(measured) << with_script;
  const std::string cmd = chromium("--window-size=1400,1000 --dump-dom", measured) + " >'" + dom.string() + "' 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(dom);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t start = text.find("<pre id=\"layout\">"), end = text.find("</pre>", start);
  if (start == std::string::npos || end == std::string::npos) return json();
  const json out = json::parse(unescape(text.substr(start + 17, end - start - 17)));
  if (const char* shots = std::getenv("ATTNKIT_REPORT_SCREENSHOTS")) {
    const std::filesystem::path png = std::filesystem::path(shots) / ("report-" + std::to_string(runs) + "-runs.png");
    const int height = std::min(out.value("height", 3000) + 20, 16000);
    const std::string shot = chromium("--window-size=1400," + std::to_string(height) + " --screenshot='" +
                                      png.string() + "'", html) + " >/dev/null 2>&1";
    EXPECT_EQ(std::system(shot.c_str()), 0) << shot;
  }
  return out;
}

bool overlap(const json& a, const json& b) {
  const double w = std::min(a[2].get<double>(), b[2].get<double>()) - std::max(a[0].get<double>(), b[0].get<double>());
  const double h = std::min(a[3].get<double>(), b[3].get<double>()) - std::max(a[1].get<double>(), b[1].get<double>());
  return w > 1.0 && h > 1.0;
}

void check_page(int runs, size_t figures) {
  SCOPED_TRACE(std::to_string(runs) + " runs");
  const json page = layout(runs, build_report(testing::synthetic_inputs(runs), "attnkit results"));
  ASSERT_TRUE(page.is_object()) << "the measuring script wrote nothing";
  EXPECT_EQ(page["figures"].size(), figures);
  EXPECT_EQ(page["text"].get<std::string>().find("no data"), std::string::npos);
  for (const json& fig : page["figures"]) {
    SCOPED_TRACE(fig["title"].get<std::string>());
    ASSERT_FALSE(fig["areas"].empty()) << "no drawing area tagged";
    const std::string kind = fig["kind"];
    const bool bars = kind == "bars", multiples = kind == "multiples";
    for (const json& a : fig["areas"]) {
      // Line plots keep a 600 x 300 px area whatever their legend holds, a small multiple 300 x 170;
      // a bar panel is 150 to 230 px wide.
      EXPECT_GE(a[2].get<double>() - a[0].get<double>(), bars ? 140 : multiples ? 280 : 560);
      EXPECT_GE(a[3].get<double>() - a[1].get<double>(), bars ? 18.0 : multiples ? 150 : 280);
    }
    const json& area = fig["areas"][0];
    std::set<std::string> titles, looks, colors;
    for (const json& e : fig["legend"]) {
      EXPECT_TRUE(titles.insert(e["title"].get<std::string>()).second) << "legend repeats " << e["title"];
      const std::string look = e["look"];
      EXPECT_TRUE(looks.insert(look).second) << "two entries look alike: " << look;
      EXPECT_TRUE(colors.insert(look.substr(0, look.find('|'))).second) << "two entries share a colour: " << look;
      if (multiples) continue;  // a panel's title names its run, not a legend
      EXPECT_EQ(e["text"], e["title"]);
      EXPECT_EQ(e["title"].get<std::string>().find(" ["), std::string::npos) << "a file number: " << e["title"];
      ASSERT_TRUE(e["box"].is_array());
      EXPECT_GE(e["box"][0].get<double>(), area[2].get<double>()) << e["title"] << " is inside the drawing area";
    }
    EXPECT_LE(titles.size(), static_cast<size_t>(runs));
    if (multiples) {
      EXPECT_EQ(titles.size(), fig["areas"].size()) << "one panel a run";
    }
    if (bars) {
      // The run labels: the texts left of the first panel, one per row, each once.
      std::set<std::string> rows;
      for (const json& t : fig["texts"]) {
        if (t["box"][2].get<double>() <= area[0].get<double>()) {
          EXPECT_TRUE(rows.insert(t["s"].get<std::string>()).second) << "row label repeats: " << t["s"];
        }
      }
      EXPECT_GE(rows.size(), 1u);
      // At least 15 px a row in every panel.
      for (const json& a : fig["areas"]) EXPECT_GE(a[3].get<double>() - a[1].get<double>(), 15.0 * rows.size());
    } else {
      EXPECT_GE(titles.size(), 1u) << "no legend";
    }
    // Nothing drawn over anything else: ticks, axis labels, legend entries, values.
    const json& texts = fig["texts"];
    for (size_t i = 0; i < texts.size(); ++i) {
      for (size_t j = i + 1; j < texts.size(); ++j) {
        EXPECT_FALSE(overlap(texts[i]["box"], texts[j]["box"])) << texts[i]["s"] << " overlaps " << texts[j]["s"];
      }
    }
  }
}

bool can_render() { return have("chromium") && gnuplot_available(); }

// One replay run: latency (decode, prefill), TTFT, TPOT, memory, step time.
TEST(ReportRender, OneRun) {
  if (!can_render()) GTEST_SKIP() << "chromium or gnuplot is not installed";
  check_page(1, 6);
}

// Three replay runs and a bench file with ceilings: also the ceiling chart and the bandwidth plot.
// With 20 the decode plot's curves also get a panel each.
TEST(ReportRender, FiveRuns) {
  if (!can_render()) GTEST_SKIP() << "chromium or gnuplot is not installed";
  check_page(5, 8);
}

TEST(ReportRender, TwentyRuns) {
  if (!can_render()) GTEST_SKIP() << "chromium or gnuplot is not installed";
  check_page(20, 9);
}

TEST(ReportRender, TwentyRunsHaveTwentyLabels) {
  const std::string html = build_report(testing::synthetic_inputs(20), "t");
  EXPECT_EQ(html.find("[1]"), std::string::npos);
  EXPECT_EQ(html.find("no data"), std::string::npos);
  // The comparison tables: one row per replay run, one per bench run and workload.
  size_t rows = 0;
  for (size_t at = html.find("<tr><td>"); at != std::string::npos; at = html.find("<tr><td>", at + 1)) ++rows;
  EXPECT_EQ(rows, 16u + 3 + 3 + 2 + 1);
}

}  // namespace
}  // namespace attnkit::serving
