// Internal to the report: runs a gnuplot script to SVG and readies the SVG for an HTML page.
#pragma once

#include <string>
#include <vector>

#include "serving/report.h"

namespace attnkit::serving::report_impl {

// gnuplot string literal: double quotes, backslash and quote escaped.
std::string gnuplot_quoted(const std::string& s);

// The fill of every drawing area ("set object ... fillcolor rgb kPlotAreaFill"): render_gnuplot
// tags the polygons of that colour with class "plot-area".
inline constexpr const char* kPlotAreaFill = "#f9f9fb";

// The start of every script: an SVG terminal of that many pixels, the drawing area's fill, grid,
// border and tics.
std::string gnuplot_preamble(double width, double height);
// The plot's tic formats and log scales.
std::string gnuplot_axes(const Plot& p);
// Series i's points as the data block $di.
std::string gnuplot_data(const Plot& p);

// Runs `script` (which must not set the output) to an SVG file, and returns it without its XML
// prolog, its ids prefixed so that several plots can share a page, the drawing areas tagged, and
// the group of the n-th plot clause drawn (over all panels of a multiplot) titled `clause_titles[n]`
// (kept as gnuplot wrote it when empty).
// Empty with `why` set when gnuplot is missing or fails.
std::string render_gnuplot(const std::string& script, const std::vector<std::string>& clause_titles,
                           std::string* why);

}  // namespace attnkit::serving::report_impl
