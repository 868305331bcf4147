// Decode throughput of the `planned` backend on the shapes its targets are stated for (llama3-8b
// heads 32q/8kv/128, bf16, page size 16): KV bytes read per second, through the shared harness.
#include <cstdio>
#include <string>
#include <vector>

#include "attnkit/registry.h"
#include "harness/bench.h"

namespace {

using attnkit::harness::Workload;

// KV bytes a decode step must read: every request's whole history, K and V.
double kv_bytes(const Workload& w) {
  const attnkit::AttentionSpec& s = w.model.layer(0);
  double tokens = 0.0;
  for (const auto& [prefix, n] : w.requests) tokens += static_cast<double>(prefix + n);
  return tokens * s.num_kv_heads * (s.head_dim_qk + s.head_dim_vo) * attnkit::dtype_size(w.kv_dtype);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string backend = argc > 1 ? argv[1] : "planned";
  const attnkit::ModelSpec model = attnkit::make_preset("llama3-8b", 1);
  std::vector<Workload> loads;
  auto add = [&](int batch, int64_t kv_len) {
    loads.push_back(attnkit::harness::make_workload(model, attnkit::harness::Phase::decode, batch, kv_len));
  };
  add(64, 16384);
  add(128, 8192);
  add(16, 8192);
  add(1, 32768);
  Workload skewed = attnkit::harness::make_workload(model, attnkit::harness::Phase::decode, 64, 8192);
  for (size_t i = 0; i < skewed.requests.size(); ++i) skewed.requests[i] = {i % 2 == 0 ? 127 : 8191, 1};
  skewed.label = "decode skewed 32 x 128 + 32 x 8192";
  loads.push_back(skewed);

  attnkit::harness::BenchOptions opt;
  opt.warmup = 5;
  opt.repeats = 50;
  std::printf("%-40s %10s %10s %12s %10s\n", "workload", "median_us", "min_us", "KV TB/s", "plan_us");
  for (const Workload& w : loads) {
    const attnkit::harness::BenchResult r = attnkit::harness::run_bench(backend, w, opt);
    if (!r.skipped.empty()) {
      std::printf("%-40s skipped: %s\n", w.label.c_str(), r.skipped.c_str());
      continue;
    }
    std::printf("%-40s %10.1f %10.1f %12.3f %10.1f\n", w.label.c_str(), r.median_ms * 1e3, r.min_ms * 1e3,
                kv_bytes(w) / (r.median_ms * 1e-3) / 1e12, r.plan_us);
  }
  return 0;
}
