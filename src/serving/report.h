// `attnkit report`: one self-contained HTML page from replay and bench result files: summary
// tables and plots (SVG from gnuplot, inlined). Plot rendering is report_plots.cc.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnkit::serving {

// One series of a plot: (x, y) points under a legend title.
struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;
  int color = -1;       // gnuplot line type of the colour; -1: the series' position
  int point_type = 7;   // points: 7 filled circle, 5 filled square, 9 filled triangle
};

struct Plot {
  std::string title;
  std::string xlabel, ylabel;
  bool logx = false, logy = false;
  enum class Style { points, lines, bars } style = Style::points;
  std::vector<Series> series;
  std::vector<std::string> bar_labels;  // bars: the x axis categories (point x = category index)
};

// The plot as inline SVG (no XML prolog), or empty with `why` set when it cannot be drawn (no
// gnuplot on PATH, no data).
std::string render_svg(const Plot& plot, std::string* why);
// Whether gnuplot can be run here.
bool gnuplot_available();

struct ReportInput {
  std::string file;     // where it came from (shown on the page)
  nlohmann::json data;  // a replay result (has "kind": "replay") or a bench result (has "results")
};

// The page. Throws attnkit::Error naming the file when an input is neither kind.
std::string build_report(const std::vector<ReportInput>& inputs, const std::string& title);

}  // namespace attnkit::serving
