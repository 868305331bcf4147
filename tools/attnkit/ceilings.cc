// Wires the harness's CPU and GPU ceiling probes (harness/ceilings.h) into the tool.
#include "ceilings.h"

#include <iostream>

#include "attnkit/tensor.h"
#include "format.h"
#include "harness/ceilings.h"

namespace attnkit::tool {

Ceilings measure_ceilings() {
  Ceilings c;
  c.cpu_read_bytes_per_s = harness::measure_read_bandwidth();
  c.cpu_fma_flop_per_s = harness::measure_fma_rate();
#ifdef ATTNKIT_WITH_CUDA
  if (cuda_available()) {
    c.gpu_read_bytes_per_s = harness::measure_gpu_read_bandwidth();
    c.gpu_matrix_flop_per_s = harness::measure_gpu_bf16_matrix_rate();
  }
#endif
  return c;
}

void print_ceilings(const Ceilings& c) {
  std::cout << "ceilings: cpu read " << si(c.cpu_read_bytes_per_s, "B/s") << ", cpu fp32 FMA "
            << si(c.cpu_fma_flop_per_s, "FLOP/s");
  if (c.gpu_read_bytes_per_s > 0) {
    std::cout << ", gpu read " << si(c.gpu_read_bytes_per_s, "B/s") << ", gpu bf16 matrix "
              << si(c.gpu_matrix_flop_per_s, "FLOP/s");
  }
  std::cout << '\n';
}

nlohmann::json ceilings_json(const Ceilings& c) {
  return {{"cpu_read_bytes_per_s", c.cpu_read_bytes_per_s},
          {"cpu_fma_flop_per_s", c.cpu_fma_flop_per_s},
          {"gpu_read_bytes_per_s", c.gpu_read_bytes_per_s},
          {"gpu_matrix_flop_per_s", c.gpu_matrix_flop_per_s}};
}

double ceiling_for(const Ceilings& c, Device device, bool memory_bound) {
  if (device == Device::cpu) return memory_bound ? c.cpu_read_bytes_per_s : c.cpu_fma_flop_per_s;
  return memory_bound ? c.gpu_read_bytes_per_s : c.gpu_matrix_flop_per_s;
}

}  // namespace attnkit::tool
