// The `cpu` kernels' SIMD target: Highway's dynamic dispatch, restricted with its test mock of the
// supported targets (the only run-time switch Highway 1.0 has), intersected with what the CPU has.
#include "attnkit/cpu_target.h"

#include <algorithm>
#include <cctype>

#include "attnkit/error.h"
#include "backends/cpu/kernels/kernels.h"
#include "hwy/targets.h"

namespace attnkit {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The compiled targets this CPU runs, best (lowest bit) first, whatever the current restriction.
std::vector<int64_t> runnable() {
  static const std::vector<int64_t> kTargets = [] {
    hwy::SetSupportedTargetsForTest(0);  // the CPU's own set (no restriction is active yet)
    std::vector<int64_t> t = hwy::SupportedAndGeneratedTargets();
    std::sort(t.begin(), t.end());
    return t;
  }();
  return kTargets;
}

}  // namespace

std::vector<std::string> cpu_targets() {
  std::vector<std::string> names;
  for (const int64_t t : runnable()) names.push_back(lower(hwy::TargetName(t)));
  return names;
}

std::string cpu_target() { return lower(hwy::TargetName(cpu::dispatched_target())); }

void set_cpu_target(const std::string& name) {
  const std::vector<int64_t> targets = runnable();
  if (name.empty() || lower(name) == "best") {
    hwy::SetSupportedTargetsForTest(0);
    return;
  }
  for (const int64_t t : targets) {
    if (lower(hwy::TargetName(t)) == lower(name)) {
      hwy::SetSupportedTargetsForTest(t);
      return;
    }
  }
  std::string list;
  for (const std::string& n : cpu_targets()) list += (list.empty() ? "" : ", ") + n;
  throw Error("cpu: target must be one this build compiled and this CPU runs (" + list + ", or best), got '" + name +
              "'");
}

}  // namespace attnkit
