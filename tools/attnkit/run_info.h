// What every result file of the tool says about where it came from: the commit the tool was built
// from, the date (UTC) and the device, so a report can label runs by what they were.
#pragma once

#include <nlohmann/json.hpp>

namespace attnkit::tool {

// {"commit": ..., "date": "YYYY-MM-DD", "device_name": the GPU's name, or "cpu only"}.
nlohmann::json run_info();

}  // namespace attnkit::tool
