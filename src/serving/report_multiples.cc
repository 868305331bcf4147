// render_small_multiples: one small panel per titled series of a Plot, each drawing its series in
// its colour over all the others in grey, on axes shared by every panel; the panel's title is the
// series' legend entry. Twenty curves that overlap in one plot each get a panel of their own.
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "serving/report.h"
#include "serving/report_svg.h"

namespace attnkit::serving {

namespace {

// The range that holds every point, widened to whole decades on a log axis.
std::pair<double, double> range(const Plot& p, bool x_axis, bool log) {
  double lo = std::numeric_limits<double>::max(), hi = std::numeric_limits<double>::lowest();
  for (const Series& s : p.series) {
    for (const auto& [x, y] : s.points) {
      const double v = x_axis ? x : y;
      if (log && v <= 0) continue;
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (lo > hi) return {1, 10};
  if (log) return {std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi)))};
  const double pad = (hi - lo) * 0.05 + (hi == lo ? 1.0 : 0.0);
  return {std::min(0.0, lo - pad), hi + pad};
}

}  // namespace

std::string render_small_multiples(const Plot& p, int columns, std::string* why) {
  std::vector<size_t> shown;  // the series with a panel: those with a title and points
  for (size_t i = 0; i < p.series.size(); ++i) {
    if (!p.series[i].title.empty() && !p.series[i].points.empty()) shown.push_back(i);
  }
  if (shown.empty()) {
    if (why) *why = "no data";
    return {};
  }
  const size_t cols = std::min<size_t>(std::max(columns, 1), shown.size());
  const size_t rows = (shown.size() + cols - 1) / cols;
  // Pixels of one cell: a 300 x 170 drawing area, tics on the left and below, the title above.
  const double left = 62, area_w = 300, right = 26, top = 26, area_h = 170, bottom = 44;
  const double cell_w = left + area_w + right, cell_h = top + area_h + bottom;
  const double width = cell_w * static_cast<double>(cols), height = cell_h * static_cast<double>(rows);
  const auto [x0, x1] = range(p, true, p.logx);
  const auto [y0, y1] = range(p, false, p.logy);
  std::ostringstream s;
  s.precision(9);
  s << report_impl::gnuplot_preamble(width, height) << report_impl::gnuplot_axes(p) << report_impl::gnuplot_data(p);
  s << "unset key\nset xrange [" << x0 << ":" << x1 << "]\nset yrange [" << y0 << ":" << y1 << "]\nset multiplot\n";
  std::vector<std::string> titles;
  for (size_t k = 0; k < shown.size(); ++k) {
    const double cx = static_cast<double>(k % cols) * cell_w, cy = static_cast<double>(k / cols) * cell_h;
    s << "set lmargin at screen " << (cx + left) / width << "\nset rmargin at screen " << (cx + left + area_w) / width
      << "\nset tmargin at screen " << 1 - (cy + top) / height << "\nset bmargin at screen "
      << 1 - (cy + top + area_h) / height << "\n";
    s << "set title " << report_impl::gnuplot_quoted(p.series[shown[k]].title) << " font ',10' offset 0,-0.6\n";
    s << "set xlabel " << report_impl::gnuplot_quoted(k / cols + 1 == rows ? p.xlabel : "") << " offset 0,0.6\n";
    s << "set ylabel " << report_impl::gnuplot_quoted(k % cols == 0 ? p.ylabel : "") << " offset 1.2,0\n";
    s << "plot ";
    for (size_t i : shown) {
      if (i == shown[k]) continue;
      s << "$d" << i << " using 1:2 with lines lw 1 lc rgb '#c8c8c8' notitle, ";
      titles.push_back("");
    }
    const Series& me = p.series[shown[k]];
    // A run of one or two points (a bench file's workloads) gets markers big enough to see alone.
    s << "$d" << shown[k] << " using 1:2 with linespoints lw 2 ps " << (me.points.size() <= 2 ? 1.2 : 0.6) << " pi "
      << std::max<size_t>(1, me.points.size() / 8)
      << " pt " << gnuplot_point_type(me.style.marker) << " lc rgb '" << me.style.color << "' notitle\n";
    titles.push_back(me.title);
  }
  s << "unset multiplot\n";
  return report_impl::render_gnuplot(s.str(), titles, why);
}

}  // namespace attnkit::serving
