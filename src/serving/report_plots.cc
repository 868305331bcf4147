// render_svg: a Plot written as a gnuplot script with inline data blocks, run through gnuplot's SVG
// terminal, and the SVG returned without its XML prolog so it can sit inside an HTML page.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "attnkit/error.h"
#include "serving/report.h"

namespace attnkit::serving {

namespace {

// gnuplot string literal: double quotes, backslash and quote escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::string script_for(const Plot& p, const std::string& svg_path) {
  std::ostringstream s;
  s.precision(9);
  s << "set terminal svg size 760,420 noenhanced font 'sans,11' background rgb 'white'\n";
  s << "set output " << quoted(svg_path) << "\n";
  s << "set title " << quoted(p.title) << "\nset xlabel " << quoted(p.xlabel) << "\nset ylabel " << quoted(p.ylabel)
    << "\n";
  s << "set grid\nset key outside right top\nset border 3\nset tics nomirror\n";
  s << "set format x '%g'\nset format y '%g'\n";
  if (p.logx) s << "set logscale x\n";
  if (p.logy) s << "set logscale y\n";
  for (size_t i = 0; i < p.series.size(); ++i) {
    s << "$d" << i << " << EOD\n";
    for (const auto& [x, y] : p.series[i].points) s << x << ' ' << y << '\n';
    s << "EOD\n";
  }
  const size_t n = p.series.size();
  if (p.style == Plot::Style::bars) {
    // Clustered bars: category on x, one bar per series, shifted side by side.
    const double width = 0.8 / static_cast<double>(std::max<size_t>(n, 1));
    s << "set style fill solid 0.8 border -1\nset boxwidth " << width << "\nset yrange [0:*]\n";
    s << "set xrange [-0.6:" << static_cast<double>(p.bar_labels.size()) - 0.4 << "]\n";
    s << "set xtics rotate by -25 (";
    for (size_t i = 0; i < p.bar_labels.size(); ++i) s << (i ? ", " : "") << quoted(p.bar_labels[i]) << ' ' << i;
    s << ")\nplot ";
    for (size_t i = 0; i < n; ++i) {
      const double shift = (static_cast<double>(i) - (static_cast<double>(n) - 1) / 2.0) * width;
      s << (i ? ", " : "") << "$d" << i << " using ($1+" << shift << "):2 with boxes title "
        << quoted(p.series[i].title);
    }
  } else {
    s << "plot ";
    for (size_t i = 0; i < n; ++i) {
      const Series& ser = p.series[i];
      s << (i ? ", " : "") << "$d" << i << " using 1:2 with "
        << (p.style == Plot::Style::lines ? "lines lw 2" : "points ps 0.5 pt " + std::to_string(ser.point_type))
        << " lc " << (ser.color >= 0 ? ser.color : static_cast<int>(i)) + 1 << " title " << quoted(ser.title);
    }
  }
  s << "\n";
  return s.str();
}

}  // namespace

bool gnuplot_available() {
  return std::system("gnuplot --version >/dev/null 2>&1") == 0;
}

std::string render_svg(const Plot& p, std::string* why) {
  size_t points = 0;
  for (const Series& s : p.series) points += s.points.size();
  if (points == 0) {
    if (why) *why = "no data for this plot in the given files";
    return {};
  }
  if (!gnuplot_available()) {
    if (why) *why = "gnuplot is not installed (apt-get install gnuplot-nox), so this plot was left out";
    return {};
  }
  namespace fs = std::filesystem;
  std::string dir_template = (fs::temp_directory_path() / "attnkit-report-XXXXXX").string();
  ATTNKIT_CHECK(mkdtemp(dir_template.data()) != nullptr, "report: cannot create a temporary folder");
  const fs::path dir(dir_template);
  const fs::path script = dir / "plot.gp", svg = dir / "plot.svg", log = dir / "gnuplot.log";
  {
    std::ofstream f(script);
    f << script_for(p, svg.string());
  }
  const std::string cmd = "gnuplot '" + script.string() + "' >'" + log.string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  std::string out = read_all(svg);
  const std::string log_text = read_all(log);
  fs::remove_all(dir);
  if (status != 0 || out.empty()) {
    if (why) *why = "gnuplot failed: " + log_text;
    return {};
  }
  // Keep from <svg on: the prolog and DOCTYPE have no place inside HTML. Every plot defines the same
  // ids (gpPt0, gnuplot_canvas, ...): prefix them so one page's plots cannot resolve each other's.
  const size_t start = out.find("<svg");
  if (start == std::string::npos) return {};
  static int plot_count = 0;
  const std::string prefix = "p" + std::to_string(++plot_count) + "_";
  out = std::regex_replace(out.substr(start), std::regex(R"((\bid=['"]|href=['"]#|url\(#))"), "$1" + prefix);
  return out;
}

}  // namespace attnkit::serving
