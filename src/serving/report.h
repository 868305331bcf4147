// `attnkit report`: one self-contained HTML page from replay and bench result files: a comparison
// table with one row per run, and plots (SVG from gnuplot, inlined). Runs and their labels are
// report_runs.cc, the tables report_tables.cc, line plots report_plots.cc, bar charts report_bars.cc.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace attnkit::serving {

// A run's look in every plot and in the table: colour, marker and dash, none of the three repeating
// together. The colours are the first `kDistinctColors` of a palette picked for distance in CIELAB.
inline constexpr int kDistinctColors = 24;
struct RunStyle {
  std::string color;  // "#rrggbb"
  int marker = 0;     // index into the marker shapes (circle, square, triangle, diamond, inverted triangle)
  int dash = 0;       // 0 solid, 1 dashed, 2 dotted
};
RunStyle run_style(int index);
int gnuplot_point_type(int marker);  // gnuplot's filled point type of a marker shape

// One series of a line or point plot: (x, y) points under a legend title (empty: not in the legend).
struct Series {
  std::string title;
  std::vector<std::pair<double, double>> points;
  RunStyle style;
  // linespoints: a marker on every point of few, on every few of many; lines: a staircase (a
  // distribution) with markers sparser still.
  enum class Draw { linespoints, lines, points } draw = Draw::linespoints;
  double alpha = 1.0;  // < 1: drawn see-through, under the others (raw samples beneath a median curve)
};

struct Plot {
  std::string xlabel, ylabel;
  bool logx = false, logy = false;
  std::string xformat = "%g", yformat = "%g";  // gnuplot tic formats ("%.0s%c": 10k, 1M)
  std::vector<Series> series;
};

// Horizontal bars, one row per run, in panels side by side that share the rows (one panel a metric).
struct BarChart {
  std::vector<std::string> rows;  // run labels, top to bottom
  std::vector<std::string> colors;  // "#rrggbb" per row
  struct Panel {
    std::string title;           // the metric and its unit
    std::vector<double> values;  // per row; NaN: no value (no bar)
    double at_least = 0;         // the axis reaches this far at least (100 for percentages)
  };
  std::vector<Panel> panels;
};

// The plot as inline SVG (no XML prolog), or empty with `why` set when it cannot be drawn (no
// gnuplot on PATH, no data). The drawing area of each plot or panel has class "plot-area", and each
// series' group is titled with its legend entry (a tooltip in the browser).
std::string render_svg(const Plot& plot, std::string* why);
std::string render_svg(const BarChart& chart, std::string* why);
// One panel per titled series, `columns` a row, each drawing its series over the others in grey on
// shared axes, titled with the series' legend entry.
std::string render_small_multiples(const Plot& plot, int columns, std::string* why);
// Whether gnuplot can be run here.
bool gnuplot_available();

struct ReportInput {
  std::string file;     // where it came from (shown on the page)
  nlohmann::json data;  // a replay result (has "kind": "replay") or a bench result (has "results")
};

// The page. Throws attnkit::Error naming the file when an input is neither kind.
std::string build_report(const std::vector<ReportInput>& inputs, const std::string& title);

}  // namespace attnkit::serving
