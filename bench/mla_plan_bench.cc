// Host cost of the `mla` backend's plan (Google Benchmark): make_plan over a DeepSeek decode batch
// (latent cache, page 64), 16 and 128 heads, the H200's 132 SMs: the scheduling metadata every
// layer reuses. The upload is one copy of what it returns (timed with the backend on a GPU).
#include <benchmark/benchmark.h>

#include <random>

#include "backends/mla/plan.h"
#include "decode_batch.h"

namespace {

using namespace attnkit;

// `n` decode requests with histories drawn from [128, max_len], page size 64.
ForwardBatch make_batch(int n, int max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len_dist(128, max_len);
  std::vector<int> kv_lens;
  for (int i = 0; i < n; ++i) kv_lens.push_back(len_dist(rng));
  return bench::decode_batch(kv_lens, 64);
}

// Args: requests, longest history, query heads.
void BM_MlaPlan(benchmark::State& state) {
  const ForwardBatch b = make_batch(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 7);
  mla::PlanShape shape;
  shape.num_qo_heads = static_cast<int>(state.range(2));
  shape.num_ctas = 132;
  size_t items = 0;
  for (auto _ : state) {
    const mla::Plan p = mla::make_plan(b, shape);
    items = p.work.size();
    benchmark::DoNotOptimize(p.work.data());
  }
  state.counters["work_items"] = static_cast<double>(items);
}
BENCHMARK(BM_MlaPlan)->Args({256, 4096, 16})->Args({256, 16384, 16})->Args({256, 4096, 128})->Args({128, 8192, 128});

}  // namespace

BENCHMARK_MAIN();
