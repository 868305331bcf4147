// render_svg for line and point plots: a Plot written as a gnuplot script with inline data blocks,
// a fixed drawing area and the legend outside it on the right; and the gnuplot run shared with the
// bar charts (report_bars.cc): the SVG returned without its XML prolog so it can sit in a page.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "attnkit/error.h"
#include "serving/report.h"
#include "serving/report_svg.h"

namespace attnkit::serving {

namespace {

// Tableau's ten, then colours each as far (CIELAB distance) from all before it as could be found,
// lightness kept between 30 and 72 so that each reads on white. No two are closer than 27 units.
constexpr const char* kPalette[kDistinctColors] = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#0000ff", "#ff1eff", "#4b5a0f", "#690fb4", "#ff0078", "#e1a55a",
    "#0078ff", "#960f4b", "#ff8787", "#5aa578", "#c300a5", "#964b00", "#0f5a4b", "#c3a5d2"};

constexpr int kMarkers = 5;
constexpr int kPointTypes[kMarkers] = {7, 5, 9, 13, 11};  // circle, square, triangle, diamond, triangle down
constexpr int kDashTypes[3] = {1, 2, 4};  // solid, dashed, dash-dot

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// "#rrggbb" drawn at `alpha`: gnuplot's "#aarrggbb", where aa is the transparency.
std::string with_alpha(const std::string& color, double alpha) {
  if (alpha >= 1.0) return color;
  char aa[3];
  std::snprintf(aa, sizeof aa, "%02x", static_cast<int>((1.0 - alpha) * 255.0 + 0.5));
  return "#" + std::string(aa) + color.substr(1);
}

}  // namespace

RunStyle run_style(int index) {
  const int i = std::max(index, 0);
  return {kPalette[i % kDistinctColors], i % kMarkers, (i / 10) % 3};
}
int gnuplot_point_type(int marker) { return kPointTypes[marker % kMarkers]; }

namespace report_impl {

std::string gnuplot_quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string render_gnuplot(const std::string& script, const std::vector<std::string>& clause_titles,
                           std::string* why) {
  if (!gnuplot_available()) {
    if (why) *why = "gnuplot is not installed (apt-get install gnuplot-nox)";
    return {};
  }
  namespace fs = std::filesystem;
  std::string dir_template = (fs::temp_directory_path() / "attnkit-report-XXXXXX").string();
  ATTNKIT_CHECK(mkdtemp(dir_template.data()) != nullptr, "report: cannot create a temporary folder");
  const fs::path dir(dir_template);
  const fs::path gp = dir / "plot.gp", svg = dir / "plot.svg", log = dir / "gnuplot.log";
  std::ofstream(gp) << "set output " << gnuplot_quoted(svg.string()) << "\n" << script;
  const std::string cmd = "gnuplot '" + gp.string() + "' >'" + log.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::string out = read_all(svg);
  const std::string log_text = read_all(log);
  fs::remove_all(dir);
  const size_t start = out.find("<svg");
  if (status != 0 || start == std::string::npos) {
    if (why) *why = "gnuplot failed: " + log_text;
    return {};
  }
  // Keep from <svg on: the prolog and DOCTYPE have no place inside HTML. Every plot defines the same
  // ids (gpPt0, gnuplot_canvas, ...): prefix them so one page's plots cannot resolve each other's.
  static int plot_count = 0;
  const std::string prefix = "p" + std::to_string(++plot_count) + "_";
  out = std::regex_replace(out.substr(start), std::regex(R"((\bid=['"]|href=['"]#|url\(#))"), "$1" + prefix);
  // gnuplot writes the area's fill as rgb(r, g, b) with the numbers padded to three places.
  unsigned r = 0, g = 0, b = 0;
  std::sscanf(kPlotAreaFill, "#%2x%2x%2x", &r, &g, &b);
  char fill[40];
  std::snprintf(fill, sizeof fill, "<polygon fill = 'rgb(%3u, %3u, %3u)'", r, g, b);
  const std::string tagged = std::string("<polygon class='plot-area'") + (fill + 8);
  for (size_t at = out.find(fill); at != std::string::npos; at = out.find(fill, at + tagged.size())) {
    out.replace(at, std::string(fill).size(), tagged);
  }
  // The clauses' groups in the order they were drawn (a multiplot numbers each panel's from 1).
  size_t at = 0;
  for (const std::string& title : clause_titles) {
    at = out.find("<title>gnuplot_plot_", at);
    if (at == std::string::npos) break;
    const size_t end = out.find("</title>", at);
    if (title.empty()) {
      at = end;
      continue;
    }
    std::string t = "<title>";
    for (char c : title) t += c == '<' ? "&lt;" : c == '&' ? "&amp;" : std::string(1, c);
    out.replace(at, end - at, t);
    at += t.size();
  }
  return out;
}

std::string gnuplot_preamble(double width, double height) {
  std::ostringstream s;
  s << "set terminal svg size " << static_cast<int>(width) << "," << static_cast<int>(height)
    << " noenhanced font 'sans,11' background rgb 'white'\nset encoding utf8\n";
  s << "set object 1 rectangle from graph 0,0 to graph 1,1 behind fillcolor rgb '" << kPlotAreaFill
    << "' fillstyle solid 1.0 noborder\n";
  s << "set grid lc rgb '#dddddd' lw 1 dt 1\nset border 3 lc rgb '#444444'\nset tics nomirror\n";
  return s.str();
}

std::string gnuplot_axes(const Plot& p) {
  std::ostringstream s;
  s << "set format x '" << p.xformat << "'\nset format y '" << p.yformat << "'\n";
  if (p.logx) s << "set logscale x\n";
  if (p.logy) s << "set logscale y\n";
  return s.str();
}

std::string gnuplot_data(const Plot& p) {
  std::ostringstream s;
  s.precision(9);
  for (size_t i = 0; i < p.series.size(); ++i) {
    s << "$d" << i << " << EOD\n";
    for (const auto& [x, y] : p.series[i].points) s << x << ' ' << y << '\n';
    s << "EOD\n";
  }
  return s.str();
}

}  // namespace report_impl

bool gnuplot_available() {
  static const bool yes = std::system("gnuplot --version >/dev/null 2>&1") == 0;
  return yes;
}

std::string render_svg(const Plot& p, std::string* why) {
  size_t points = 0, entries = 0, longest = 0;
  for (const Series& s : p.series) {
    points += s.points.size();
    if (!s.title.empty()) ++entries, longest = std::max(longest, s.title.size());
  }
  if (points == 0) {
    if (why) *why = "no data";
    return {};
  }
  // Pixels: the drawing area keeps its size whatever the legend holds; the legend (one line a
  // series, one column) widens and lengthens the picture instead.
  const double left = 80, area_w = 600, gap = 20, key_w = 60 + 6.6 * static_cast<double>(longest);
  const double top = 12, bottom = 48, area_h = std::max(300.0, 17.0 * static_cast<double>(entries) + 16);
  const double width = left + area_w + gap + key_w, height = top + area_h + bottom;
  std::ostringstream s;
  s.precision(9);
  s << report_impl::gnuplot_preamble(width, height) << report_impl::gnuplot_axes(p) << report_impl::gnuplot_data(p);
  s << "set lmargin at screen " << left / width << "\nset rmargin at screen " << (left + area_w) / width
    << "\nset tmargin at screen " << 1 - top / height << "\nset bmargin at screen " << bottom / height << "\n";
  s << "set xlabel " << report_impl::gnuplot_quoted(p.xlabel) << "\nset ylabel " << report_impl::gnuplot_quoted(p.ylabel)
    << "\n";
  s << "set key outside right top Left reverse samplen 3 spacing 1.0 maxrows " << std::max<size_t>(entries, 1)
    << "\n";
  std::vector<std::string> titles;
  s << "plot ";
  for (size_t i = 0; i < p.series.size(); ++i) {
    const Series& ser = p.series[i];
    const std::string lc = " lc rgb '" + with_alpha(ser.style.color, ser.alpha) + "'";
    const std::string pt = " pt " + std::to_string(gnuplot_point_type(ser.style.marker));
    const std::string dt = " dt " + std::to_string(kDashTypes[ser.style.dash % 3]);
    const std::string title = ser.title.empty() ? " notitle" : " title " + report_impl::gnuplot_quoted(ser.title);
    s << (i ? ", \\\n  " : "");
    // Markers on every few points of a curve: enough to tell the runs apart, few enough to see the line.
    const size_t every = std::max<size_t>(1, ser.points.size() / (ser.draw == Series::Draw::lines ? 6 : 12));
    const std::string marks = " ps 0.8 pi " + std::to_string(every) + pt;
    switch (ser.draw) {
      case Series::Draw::linespoints:
        s << "$d" << i << " using 1:2 with linespoints lw 1.6" << marks << dt << lc << title;
        titles.push_back(ser.title);
        break;
      case Series::Draw::lines:
        // A staircase (a distribution's steps), its markers, and the legend entry that shows both.
        // The markers of curves side by side start a point apart, so that they do not stack.
        s << "$d" << i << " using 1:2 with steps lw 1.6" << dt << lc << " notitle, $d" << i << " every " << every
          << "::" << i % every << " using 1:2 with points ps 0.8" << pt << lc
          << " notitle, keyentry with linespoints lw 1.6" << marks << dt << lc << title;
        titles.insert(titles.end(), {"", "", ser.title});
        break;
      case Series::Draw::points:
        s << "$d" << i << " using 1:2 with points ps 0.45" << pt << lc << title;
        titles.push_back(ser.title);
        break;
    }
  }
  s << "\n";
  return report_impl::render_gnuplot(s.str(), titles, why);
}

}  // namespace attnkit::serving
