// Which SIMD target the `cpu` backend's kernels run on. They are compiled for several (Highway's
// targets: AVX3, AVX2, SSE4, ... on x86, NEON/SVE on Arm) and by default run the best one this CPU
// has; a caller may restrict them to another, process-wide, to compare targets on one machine.
#pragma once

#include <string>
#include <vector>

namespace attnkit {

// Targets the build compiled and this CPU runs, best first, by Highway's names in lower case
// (hwy::TargetName: "avx3", "avx2", "sse4", "ssse3", "emu128").
std::vector<std::string> cpu_targets();

// The target the `cpu` kernels run on now.
std::string cpu_target();

// Restricts every `cpu` kernel to the named target (any case), process-wide, for the `cpu`
// backends made after the call; "" or "best" goes back to the best one. A name not in
// cpu_targets() throws attnkit::Error listing them. Not to be called while a `cpu` backend runs.
void set_cpu_target(const std::string& name);

}  // namespace attnkit
