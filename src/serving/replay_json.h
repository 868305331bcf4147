// The JSON a replay writes (read back by `attnkit report`): the trace, the options, and per run the
// summary, the verification, and the step, request and inter-token records (thinned to a bound).
#pragma once

#include <nlohmann/json.hpp>

#include "serving/replay.h"

namespace attnkit::serving {

// At most this many step, request and inter-token records go into a run's JSON (evenly thinned).
inline constexpr size_t kMaxJsonRecords = 4000;

nlohmann::json trace_json(const Trace& trace);
nlohmann::json run_json(const ReplayResult& result);

}  // namespace attnkit::serving
