// Cold costs (13 us of host work between iterations) of the ways to know an upload two iterations
// back has finished: event record + synchronize, event query, or a stream-written host flag.
#include <cuda.h>
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
static double med(std::vector<double> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }
int main() {
  const size_t bytes = 200000;
  cudaStream_t s = cudaStreamPerThread;
  void *h[2], *d;
  for (auto& x : h) cudaMallocHost(&x, bytes);
  cudaMalloc(&d, bytes);
  cudaEvent_t ev[2];
  for (auto& e : ev) cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  using WV = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
  WV wv = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPoint("cuStreamWriteValue32", (void**)&wv, cudaEnableDefault, &q);
  volatile unsigned* flag;
  cudaHostAlloc((void**)&flag, 64, cudaHostAllocMapped);
  unsigned* dflag;
  cudaHostGetDevicePointer((void**)&dflag, (void*)flag, 0);
  std::vector<int> mem(300000 / 4);
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<double> t_wait, t_up;
    unsigned seq = 0, seq_of[2] = {0, 0};
    bool pending[2] = {false, false};
    int cur = 0, waited = 0;
    for (int i = 0; i < 400; ++i) {
      cur ^= 1;
      auto a = Clock::now();
      if (pending[cur]) {
        if (mode == 0) cudaEventSynchronize(ev[cur]);
        if (mode == 1) { if (cudaEventQuery(ev[cur]) != cudaSuccess) { ++waited; cudaEventSynchronize(ev[cur]); } }
        if (mode == 2) { while (static_cast<int>(*flag - seq_of[cur]) < 0) ++waited; }
      }
      auto b = Clock::now();
      busy(13.0, mem);
      memset(h[cur], i, 64);
      auto c = Clock::now();
      cudaMemcpyAsync(d, h[cur], bytes, cudaMemcpyHostToDevice, s);
      if (mode < 2) cudaEventRecord(ev[cur], s); else wv((CUstream)s, (CUdeviceptr)dflag, seq_of[cur] = ++seq, 0);
      auto e = Clock::now();
      pending[cur] = true;
      if (i >= 50) { t_wait.push_back(us(a, b)); t_up.push_back(us(c, e)); }
    }
    cudaDeviceSynchronize();
    printf("%s: wait %.2f us, copy+mark %.2f us, sum %.2f (waited %d)\n",
           mode == 0 ? "record+synchronize" : (mode == 1 ? "record+query" : "writeValue32+flag"), med(t_wait), med(t_up),
           med(t_wait) + med(t_up), waited);
  }
}
