// Host cost of the `planned` backend's plan (Google Benchmark): the decode scheduler alone, and with
// the batch's CSR arrays written into the staging layout; each other step of init_forward_metadata
// alone (validation, the arrays' copy, the upload's CUDA calls).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "attnkit/registry.h"
#include "decode_batch.h"
#include "backends/planned/graph_state.h"
#include "backends/planned/page_table.h"
#include "backends/planned/plan.h"

namespace {

using namespace attnkit;
using namespace attnkit::planned;

// How a batch's history lengths are chosen.
enum Lengths { kUniform = 0, kRandom = 1, kSkewed = 2 };

// A decode batch of `n` requests (llama3-8b heads, page size 16): every history `max_len` long,
// lengths drawn from [128, max_len], or the skewed mix (half 128, half 8192).
ForwardBatch make_batch(int n, int max_len, Lengths lengths, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len_dist(128, std::max(max_len, 128));
  std::vector<int> kv_lens;
  for (int i = 0; i < n; ++i) {
    kv_lens.push_back(lengths == kSkewed ? (i % 2 == 0 ? 128 : 8192) : lengths == kRandom ? len_dist(rng) : max_len);
  }
  return bench::decode_batch(kv_lens, 16);
}

// What the backend plans on the H200 (132 SMs, 3 decode CTAs each at head_dim 128) for llama3-8b
// heads: one share of the KV heads (decode_grid_ctas, plan_head_reps: 8 shares of 1 KV head on 49 CTAs).
PlanShape llama3_8b_shape() {
  PlanShape grid;
  grid.num_qo_heads = 32;
  grid.num_kv_heads = 8;
  grid.head_dim = 128;
  grid.num_ctas = decode_grid_ctas(132 * 3, grid.num_kv_heads);
  return share_shape(grid, plan_head_reps(grid));
}

// The batch a benchmark's arguments name: (requests, kv_len or its maximum, Lengths).
ForwardBatch batch_for(const benchmark::State& state) {
  return make_batch(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                    static_cast<Lengths>(state.range(2)), 1);
}
// A pool just large enough for the batch's pages.
int pool_pages(const ForwardBatch& b) { return static_cast<int>(b.kv_page_indices.size()) + 1; }

// One upload buffer's host side, sized for a batch.
struct Staging {
  Staging(const ForwardBatch& b, const PlanShape& shape) : Staging(capacity_for(b, shape), shape) {}
  Staging(const PlanCapacity& c, const PlanShape& shape)
      : cap(c), layout(make_layout(cap, shape, 1)), bytes(layout.total_bytes) {}
  PlanCapacity cap;
  PlanLayout layout;
  std::vector<std::byte> bytes;
};

void BM_PlanDecode(benchmark::State& state) {
  const ForwardBatch b = batch_for(state);
  const PlanShape shape = llama3_8b_shape();
  Staging st(b, shape);
  auto plan = [&] { return plan_decode(b, shape, -1, decode_view(st.layout, st.cap, shape, 0, st.bytes.data())); };
  for (auto _ : state) benchmark::DoNotOptimize(plan());
  const DecodePlanStats stats = plan();
  state.counters["items"] = stats.num_items;
  state.counters["merges"] = stats.num_merges;
  state.counters["balance"] =
      static_cast<double>(stats.max_cta_cost) * shape.num_ctas / static_cast<double>(stats.total_cost);
}

void BM_PlanDecodeWithBatchArrays(benchmark::State& state) {
  const ForwardBatch b = batch_for(state);
  const PlanShape shape = llama3_8b_shape();
  for (auto _ : state) {
    const PlanCapacity cap = capacity_for(b, shape);
    const PlanLayout layout = make_layout(cap, shape, 1);
    static std::vector<std::byte> staging;
    if (staging.size() < layout.total_bytes) staging.resize(layout.total_bytes);
    write_batch_arrays(b, layout, staging.data());
    DecodePlanStats st = plan_decode(b, shape, -1, decode_view(layout, cap, shape, 0, staging.data()));
    benchmark::DoNotOptimize(st);
  }
  state.counters["pages"] = static_cast<double>(b.kv_page_indices.size());
}

// The other host steps of init_forward_metadata, each alone: the batch's validation against the
// cache (all but the page-table range, which the copy checks), and the copy of its arrays into the
// staging layout.
void BM_ValidateBatch(benchmark::State& state) {
  const ForwardBatch b = batch_for(state);
  KvCacheConfig cache;
  cache.page_size = b.page_size;
  cache.num_pages = pool_pages(b);
  for (auto _ : state) b.validate_except_page_range(cache);
  state.counters["pages"] = static_cast<double>(b.kv_page_indices.size());
}

void BM_WriteBatchArrays(benchmark::State& state) {
  const ForwardBatch b = batch_for(state);
  Staging st(b, llama3_8b_shape());
  for (auto _ : state) {
    write_batch_arrays(b, st.layout, st.bytes.data());
    benchmark::ClobberMemory();
  }
  state.counters["pages"] = static_cast<double>(b.kv_page_indices.size());
}

// The page table's write into its slots: the same batch again (every line compared, none written)
// into one staging table or two in turn (the arena's), and the flat copy it replaced.
void BM_PageTableSameBatch(benchmark::State& state) {
  const ForwardBatch b = batch_for(state);
  const int buffers = static_cast<int>(state.range(3));  // the staging buffers written in turn
  std::vector<Staging> st(static_cast<size_t>(buffers), Staging(b, llama3_8b_shape()));
  PageTableSlots slots;
  int turn = 0;
  for (auto _ : state) {
    Staging& s = st[static_cast<size_t>(turn++ % buffers)];
    auto* page_begin = reinterpret_cast<int32_t*>(s.bytes.data() + s.layout.page_begin);
    auto* table = reinterpret_cast<int32_t*>(s.bytes.data() + s.layout.kv_page_indices);
    benchmark::DoNotOptimize(slots.write(b, pool_pages(b), s.layout.page_table_entries, page_begin, table));
    benchmark::ClobberMemory();
  }
  state.counters["pages"] = static_cast<double>(b.kv_page_indices.size());
}
// The same write for a serving loop's next decode steps: each history one position longer, a new
// page where it crosses a page's end, the batch's arrays built anew before each write (untimed), and
// two staging tables written in turn as the arena's two buffers are.
void BM_PageTableNextSteps(benchmark::State& state) {
  ForwardBatch b = batch_for(state);
  PlanCapacity cap = capacity_for(b, llama3_8b_shape());
  cap.num_pages *= 4;  // room for the pages the steps add
  Staging st[2] = {Staging(cap, llama3_8b_shape()), Staging(cap, llama3_8b_shape())};
  PageTableSlots slots;
  const int n = b.batch_size();
  std::vector<std::vector<int32_t>> pages(static_cast<size_t>(n));
  std::vector<int> kv_len(static_cast<size_t>(n));
  int next_page = 0;
  for (int i = 0; i < n; ++i) {
    pages[i].assign(b.kv_page_indices.begin() + b.kv_page_indptr[i], b.kv_page_indices.begin() + b.kv_page_indptr[i + 1]);
    kv_len[i] = b.kv_len(i);
    for (int32_t p : pages[i]) next_page = std::max(next_page, p + 1);
  }
  const int pool = pool_pages(b) + (1 << 20);
  int turn = 0;
  for (auto _ : state) {
    ForwardBatch nb;  // built as build_batch builds it: every array anew
    nb.mode = ForwardMode::decode;
    nb.page_size = b.page_size;
    nb.kv_page_indptr.push_back(0);
    nb.qo_indptr.resize(static_cast<size_t>(n) + 1);
    for (int i = 0; i <= n; ++i) nb.qo_indptr[i] = i;
    for (int i = 0; i < n; ++i) {
      if (kv_len[i]++ % b.page_size == 0) pages[i].push_back(next_page++);
      nb.kv_page_indices.insert(nb.kv_page_indices.end(), pages[i].begin(), pages[i].end());
      nb.kv_page_indptr.push_back(static_cast<int32_t>(nb.kv_page_indices.size()));
    }
    Staging& s = st[turn ^= 1];
    auto* page_begin = reinterpret_cast<int32_t*>(s.bytes.data() + s.layout.page_begin);
    auto* table = reinterpret_cast<int32_t*>(s.bytes.data() + s.layout.kv_page_indices);
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(slots.write(nb, pool, s.layout.page_table_entries, page_begin, table));
    benchmark::ClobberMemory();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["pages"] = static_cast<double>(b.kv_page_indices.size());
}
void BM_PageTableFlatCopy(benchmark::State& state) {
  const ForwardBatch b = batch_for(state);
  Staging st(b, llama3_8b_shape());
  auto* table = reinterpret_cast<int32_t*>(st.bytes.data() + st.layout.kv_page_indices);
  for (auto _ : state) {
    b.copy_page_indices(table, pool_pages(b));
    benchmark::ClobberMemory();
  }
}

// The CUDA side of a plan: the staging buffer's turn and the one upload enqueued, with the copy
// engine idle at each start (outside the timing), as between plans a layer's work apart: back to
// back, the loop would time the copies themselves. Skipped where there is no CUDA device.
void BM_PlanUpload(benchmark::State& state) {
  std::string why;
  if (!cuda_available(&why)) {
    state.SkipWithError(why.c_str());
    return;
  }
  const ForwardBatch b = batch_for(state);
  const PlanShape shape = llama3_8b_shape();
  PlanArena arena;
  arena.reserve(capacity_for(b, shape), shape, 1);
  const size_t bytes = arena.layout().used_bytes(static_cast<int>(b.kv_page_indices.size()));
  for (auto _ : state) {
    benchmark::DoNotOptimize(arena.begin_write());
    arena.upload(0, bytes, cudaStreamPerThread);  // the backend's stream
    state.PauseTiming();
    synchronize(Device::cuda);
    state.ResumeTiming();
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}

// (requests, kv_len or its maximum, Lengths)
BENCHMARK(BM_PlanDecode)
    ->Args({256, 4096, kRandom})
    ->Args({256, 16384, kRandom})
    ->Args({64, 16384, kRandom})
    ->Args({64, 0, kSkewed})
    ->Args({64, 16384, kUniform})
    ->Args({128, 8192, kUniform})
    ->Args({64, 4096, kUniform})
    ->Args({16, 8192, kUniform})
    ->Args({1, 32768, kUniform});
BENCHMARK(BM_PlanDecodeWithBatchArrays)->Args({256, 4096, kRandom})->Args({256, 512, kRandom});
BENCHMARK(BM_ValidateBatch)->Args({256, 4096, kRandom})->Args({256, 16384, kRandom});
BENCHMARK(BM_WriteBatchArrays)->Args({256, 4096, kRandom})->Args({256, 16384, kRandom});
BENCHMARK(BM_PageTableSameBatch)->Args({256, 4096, kRandom, 1})->Args({256, 4096, kRandom, 2})->Args({256, 16384, kRandom, 2});
BENCHMARK(BM_PageTableNextSteps)->Args({256, 4096, kRandom})->Args({256, 16384, kRandom})->UseManualTime()->Iterations(300);
BENCHMARK(BM_PageTableFlatCopy)->Args({256, 4096, kRandom})->Args({256, 16384, kRandom});
BENCHMARK(BM_PlanUpload)->Args({256, 4096, kRandom})->Args({256, 16384, kRandom});

}  // namespace

BENCHMARK_MAIN();
