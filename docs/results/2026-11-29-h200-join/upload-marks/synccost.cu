// What cudaEventSynchronize costs in a plan-like loop: host work between uploads, the event of the
// upload two iterations back waited for, each part timed alone.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }
static void busy(double target_us, std::vector<int>& mem) {
  const auto t0 = Clock::now();
  long s = 0;
  while (us(t0, Clock::now()) < target_us) for (size_t i = 0; i < mem.size(); i += 16) s += mem[i]++;
  if (s == 42) printf(" ");
}
int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? atol(argv[1]) : 200000;
  const double work_us = argc > 2 ? atof(argv[2]) : 13.0;
  for (int mode = 0; mode < 3; ++mode) {
    cudaStream_t s;
    if (mode == 0) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); else s = cudaStreamPerThread;
    void *h[2], *d;
    for (auto& x : h) cudaMallocHost(&x, bytes);
    cudaMalloc(&d, bytes);
    cudaEvent_t ev[2];
    for (auto& e : ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    bool pending[2] = {false, false};
    std::vector<int> mem(mode == 2 ? 300000 / 4 : 1024);
    std::vector<double> t_sync, t_copy, t_query_before;
    int cur = 0;
    for (int i = 0; i < 400; ++i) {
      cur ^= 1;
      auto a = Clock::now();
      int done_before = pending[cur] ? (cudaEventQuery(ev[cur]) == cudaSuccess) : 1;
      auto b = Clock::now();
      if (pending[cur]) cudaEventSynchronize(ev[cur]);
      auto c = Clock::now();
      busy(work_us, mem);
      memset(h[cur], i, 64);
      auto e = Clock::now();
      cudaMemcpyAsync(d, h[cur], bytes, cudaMemcpyHostToDevice, s);
      cudaEventRecord(ev[cur], s);
      auto f = Clock::now();
      pending[cur] = true;
      if (i >= 50) { t_sync.push_back(us(b, c)); t_copy.push_back(us(e, f)); t_query_before.push_back(done_before); }
    }
    cudaDeviceSynchronize();
    auto med = [](std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; };
    double done = 0; for (double x : t_query_before) done += x;
    printf("mode %s, %zu B, host work %.0f us: sync %.2f us (median), copy+record %.2f us, event done before sync %.0f%%\n",
           mode == 0 ? "nonblocking stream" : (mode == 1 ? "per-thread stream" : "per-thread + 300KB touched"), bytes, work_us,
           med(t_sync), med(t_copy), 100.0 * done / t_query_before.size());
  }
}
