// Internal to the report: HTML helpers and the page's tables (report_tables.cc).
#pragma once

#include <string>
#include <vector>

#include "serving/report.h"
#include "serving/report_runs.h"

namespace attnkit::serving::report_impl {

std::string html_escape(const std::string& s);
std::string fixed(double v, int digits);

// The run's colour, marker and dash as a small inline mark, to match a table row with the plots.
std::string swatch(const Run& run);

// The comparison tables: one row per replay run, one per bench run and workload, with the fields
// that tell the runs apart and the key figures.
std::string comparison_tables(const std::vector<Run>& runs);

// What each input file was (trace, rows dropped or clamped, model, device), folded away.
std::string input_details(const std::vector<ReportInput>& inputs);

}  // namespace attnkit::serving::report_impl
