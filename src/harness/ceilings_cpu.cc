// The CPU bandwidth and FMA probes behind `attnkit bench --ceilings`: SIMD loops compiled for every
// Highway target, dispatched at run time, run on every thread of the cpu backend's pool.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/ceilings_cpu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnkit::harness::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sums n floats (n a multiple of 8 vectors): eight accumulators keep enough loads in flight.
float sum_floats(const float* HWY_RESTRICT p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  auto a4 = hn::Zero(d), a5 = hn::Zero(d), a6 = hn::Zero(d), a7 = hn::Zero(d);
  for (int64_t i = 0; i + 8 * lanes <= n; i += 8 * lanes) {
    a0 = hn::Add(a0, hn::LoadU(d, p + i));
    a1 = hn::Add(a1, hn::LoadU(d, p + i + lanes));
    a2 = hn::Add(a2, hn::LoadU(d, p + i + 2 * lanes));
    a3 = hn::Add(a3, hn::LoadU(d, p + i + 3 * lanes));
    a4 = hn::Add(a4, hn::LoadU(d, p + i + 4 * lanes));
    a5 = hn::Add(a5, hn::LoadU(d, p + i + 5 * lanes));
    a6 = hn::Add(a6, hn::LoadU(d, p + i + 6 * lanes));
    a7 = hn::Add(a7, hn::LoadU(d, p + i + 7 * lanes));
  }
  const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

// Runs `iters` rounds of 16 independent FMA chains (more than latency x issue width on any
// current core); returns the FLOPs done and leaves the result in *sink so nothing is elided.
double fma_loop(int64_t iters, float* sink) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.9999999f);
  const auto c = hn::Set(d, 1e-7f);
  auto a0 = hn::Set(d, 0.1f), a1 = hn::Set(d, 0.2f), a2 = hn::Set(d, 0.3f), a3 = hn::Set(d, 0.4f);
  auto a4 = hn::Set(d, 0.5f), a5 = hn::Set(d, 0.6f), a6 = hn::Set(d, 0.7f), a7 = hn::Set(d, 0.8f);
  auto a8 = hn::Set(d, 0.9f), a9 = hn::Set(d, 1.0f), a10 = hn::Set(d, 1.1f), a11 = hn::Set(d, 1.2f);
  auto a12 = hn::Set(d, 1.3f), a13 = hn::Set(d, 1.4f), a14 = hn::Set(d, 1.5f), a15 = hn::Set(d, 1.6f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c), a1 = hn::MulAdd(a1, m, c), a2 = hn::MulAdd(a2, m, c), a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c), a5 = hn::MulAdd(a5, m, c), a6 = hn::MulAdd(a6, m, c), a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c), a9 = hn::MulAdd(a9, m, c), a10 = hn::MulAdd(a10, m, c), a11 = hn::MulAdd(a11, m, c);
    a12 = hn::MulAdd(a12, m, c), a13 = hn::MulAdd(a13, m, c), a14 = hn::MulAdd(a14, m, c), a15 = hn::MulAdd(a15, m, c);
  }
  auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  s = hn::Add(s, hn::Add(hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)), hn::Add(hn::Add(a12, a13), hn::Add(a14, a15))));
  *sink = hn::GetLane(hn::SumOfLanes(d, s));
  return 2.0 * 16.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iters);
}

}  // namespace attnkit::harness::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <chrono>
#include <vector>

#include "attnkit/tensor.h"
#include "backends/cpu/thread_pool.h"
#include "harness/ceilings.h"

namespace attnkit::harness {
HWY_EXPORT(sum_floats);
HWY_EXPORT(fma_loop);

namespace {
float sum_floats_best(const float* p, int64_t n) { return HWY_DYNAMIC_DISPATCH(sum_floats)(p, n); }
double fma_loop_best(int64_t iters, float* sink) { return HWY_DYNAMIC_DISPATCH(fma_loop)(iters, sink); }

constexpr int64_t kBandwidthBytes = int64_t{512} << 20;  // 16x the largest L3 we run on
constexpr int kPasses = 5;
constexpr int64_t kFmaIters = 20'000'000;  // ~0.1 s a run at 3 GHz

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

ReadProbe::ReadProbe() {
  cpu::ThreadPool& pool = cpu::ThreadPool::global();
  threads_ = pool.num_threads();
  const int64_t n = kBandwidthBytes / static_cast<int64_t>(sizeof(float));
  // A Buffer, like the KV pools: on the same (huge, where the system allows) pages.
  storage_ = std::make_unique<Buffer>(Device::cpu, static_cast<size_t>(n) * sizeof(float));
  data_ = static_cast<float*>(storage_->data());
  // Slices of whole 4 KiB pages, each first touched by the thread that later reads it.
  slice_ = (n / threads_) & ~int64_t{1023};
  pool.run(threads_, [&](int64_t t, int) { std::fill_n(data_ + t * slice_, slice_, 1.0f); });
}

ReadProbe::~ReadProbe() = default;

double ReadProbe::pass() {
  std::vector<float> sums(static_cast<size_t>(threads_));
  const auto start = std::chrono::steady_clock::now();
  cpu::ThreadPool::global().run(threads_, [&](int64_t t, int) {
    sums[static_cast<size_t>(t)] = sum_floats_best(data_ + t * slice_, slice_);
  });
  const double rate = static_cast<double>(slice_ * threads_) * sizeof(float) / seconds_since(start);
  volatile float keep = sums[0];  // the sums must be observable, or the loads could go
  (void)keep;
  return rate;
}

double measure_read_bandwidth() {
  ReadProbe probe;
  double best = 0.0;
  for (int pass = 0; pass < kPasses; ++pass) best = std::max(best, probe.pass());
  return best;
}

double measure_fma_rate() {
  cpu::ThreadPool& pool = cpu::ThreadPool::global();
  const int threads = pool.num_threads();
  std::vector<float> sinks(static_cast<size_t>(threads));
  std::vector<double> flops(static_cast<size_t>(threads));
  double best = 0.0;
  for (int pass = 0; pass < kPasses; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.run(threads, [&](int64_t t, int) {
      flops[static_cast<size_t>(t)] = fma_loop_best(kFmaIters, &sinks[static_cast<size_t>(t)]);
    });
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / seconds_since(start));
  }
  volatile float keep = sinks[0];
  (void)keep;
  return best;
}

}  // namespace attnkit::harness
#endif  // HWY_ONCE
