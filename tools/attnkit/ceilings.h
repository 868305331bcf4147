// This machine's ceilings for `attnkit bench --ceilings`: read bandwidth and arithmetic rate of the
// CPU and, when there is one, the GPU, each measured by its own probe.
#pragma once

#include <nlohmann/json.hpp>

#include "attnkit/dtype.h"

namespace attnkit::tool {

struct Ceilings {
  double cpu_read_bytes_per_s = 0.0;
  double cpu_fma_flop_per_s = 0.0;   // fp32 FMA, all cores
  double gpu_read_bytes_per_s = 0.0;
  double gpu_matrix_flop_per_s = 0.0;  // bf16 tensor cores
};

Ceilings measure_ceilings();
void print_ceilings(const Ceilings& c);
nlohmann::json ceilings_json(const Ceilings& c);
// The ceiling a result on `device` is compared with: bandwidth when memory-bound, else the rate.
double ceiling_for(const Ceilings& c, Device device, bool memory_bound);

}  // namespace attnkit::tool
