// What `attnkit replay` prints and writes: the trace line, the comparison table with the scheduler
// overhead, and the results JSON that `attnkit report` reads.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serving/replay.h"

namespace attnkit::tool {

struct RunOutcome {
  serving::ReplayResult result;
  std::string error;  // non-empty: the run failed (verification, a lost request, a leaked page)
};

void print_trace_line(const serving::Trace& trace, const serving::ReplayOptions& options);
void print_comparison(const std::vector<RunOutcome>& runs);
nlohmann::json results_json(const serving::Trace& trace, const std::string& preset,
                            const serving::ReplayOptions& options, double speed, const std::vector<RunOutcome>& runs);

}  // namespace attnkit::tool
