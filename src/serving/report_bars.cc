// render_svg for bar charts: one gnuplot multiplot of horizontal bar panels side by side, the run
// labels once on the left, a row per run in the run's colour and its value at the end of the bar.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "serving/report.h"
#include "serving/report_svg.h"

namespace attnkit::serving {

namespace {

std::string value_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v >= 1000 ? "%.0f" : "%.3g", v);
  return buf;
}

int rgb_int(const std::string& color) {
  unsigned v = 0;
  std::sscanf(color.c_str(), "#%x", &v);
  return static_cast<int>(v);
}

// The chart once the panels and rows with nothing to show are gone.
std::string render_kept(const BarChart& c, std::string* why) {
  if (c.rows.empty()) {
    if (why) *why = "no data";
    return {};
  }
  std::vector<const BarChart::Panel*> panels;
  for (const BarChart::Panel& p : c.panels) panels.push_back(&p);
  size_t longest = 0;
  for (const std::string& r : c.rows) longest = std::max(longest, r.size());
  // Panels narrow (to 150 px) so that a chart of many fits a page 1340 px wide.
  const double n = static_cast<double>(panels.size());
  const double label_w = 20 + 6.6 * static_cast<double>(longest), gap = 30;
  const double panel_w = std::clamp((1340 - label_w - 20 + gap) / n - gap, 150.0, 230.0);
  const double top = 30, bottom = 36, row_h = 19, area_h = row_h * static_cast<double>(c.rows.size()) + 8;
  const double width = label_w + n * panel_w + (n - 1) * gap + 20, height = top + area_h + bottom;
  std::ostringstream s;
  s.precision(9);
  s << report_impl::gnuplot_preamble(width, height) << "set grid noytics\nset ytics scale 0\nunset key\n";
  s << "set multiplot\nset tmargin at screen " << 1 - top / height << "\nset bmargin at screen " << bottom / height
    << "\n";
  s << "set yrange [" << static_cast<double>(c.rows.size()) - 0.4 << ":-0.6]\nset xtics format '%g'\n";
  std::vector<std::string> no_titles;
  for (size_t k = 0; k < panels.size(); ++k) {
    const BarChart::Panel& p = *panels[k];
    const double x0 = label_w + static_cast<double>(k) * (panel_w + gap);
    s << "set lmargin at screen " << x0 / width << "\nset rmargin at screen " << (x0 + panel_w) / width << "\n";
    s << "set title " << report_impl::gnuplot_quoted(p.title) << "\nset ytics (";
    for (size_t r = 0; r < c.rows.size(); ++r) {
      s << (r ? ", " : "") << report_impl::gnuplot_quoted(k == 0 ? c.rows[r] : "") << ' ' << r;
    }
    s << ")\n";
    double top_value = 0;
    s << "$d" << k << " << EOD\n";
    for (size_t r = 0; r < c.rows.size() && r < p.values.size(); ++r) {
      const double v = p.values[r];
      if (!std::isfinite(v)) continue;
      top_value = std::max(top_value, v);
      s << r << ' ' << v << ' ' << rgb_int(r < c.colors.size() ? c.colors[r] : "#1f77b4") << ' '
        << report_impl::gnuplot_quoted(value_text(v)) << '\n';
    }
    s << "EOD\n";
    // Room at the bar's end for its value.
    const double room = top_value * (panel_w < 200 ? 1.45 : 1.32);
    s << "set xrange [0:" << std::max({room, p.at_least, 1e-9}) << "]\n";
    s << "plot $d" << k << " using ($2/2):1:(0):2:($1-0.36):($1+0.36):3 with boxxyerror fs solid 0.85 noborder "
      << "lc rgb variable notitle, '' using 2:1:4 with labels left offset char 0.4,0 font ',10' tc rgb '#333333' notitle\n";
  }
  s << "unset multiplot\n";
  return report_impl::render_gnuplot(s.str(), no_titles, why);
}

}  // namespace

std::string render_svg(const BarChart& c, std::string* why) {
  std::vector<const BarChart::Panel*> panels;
  for (const BarChart::Panel& p : c.panels) {
    // A panel of zeros says nothing (a GPU-only part on CPU runs): leave it out.
    if (std::any_of(p.values.begin(), p.values.end(), [](double v) { return std::isfinite(v) && v != 0.0; })) {
      panels.push_back(&p);
    }
  }
  // Nor does a row with no bar in any panel kept (a CPU bench run's zero workspace).
  BarChart kept;
  for (size_t r = 0; r < c.rows.size(); ++r) {
    const bool any = std::any_of(panels.begin(), panels.end(), [&](const BarChart::Panel* p) {
      return r < p->values.size() && std::isfinite(p->values[r]) && p->values[r] != 0.0;
    });
    if (!any) continue;
    kept.rows.push_back(c.rows[r]);
    kept.colors.push_back(r < c.colors.size() ? c.colors[r] : "#1f77b4");
  }
  for (const BarChart::Panel* p : panels) {
    BarChart::Panel q{p->title, {}, p->at_least};
    for (size_t r = 0; r < c.rows.size(); ++r) {
      if (std::find(kept.rows.begin(), kept.rows.end(), c.rows[r]) != kept.rows.end()) {
        q.values.push_back(r < p->values.size() ? p->values[r] : std::nan(""));
      }
    }
    kept.panels.push_back(std::move(q));
  }
  return render_kept(kept, why);
}

}  // namespace attnkit::serving
