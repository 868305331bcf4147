#include "run_info.h"

#include <ctime>
#include <string>

#include "attnkit/tensor.h"
#include "build_info.h"

namespace attnkit::tool {

nlohmann::json run_info() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const std::string gpu = cuda_device_name();
  return {{"commit", ATTNKIT_BUILD_COMMIT}, {"date", date}, {"device_name", gpu.empty() ? "cpu only" : gpu}};
}

}  // namespace attnkit::tool
