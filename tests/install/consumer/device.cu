// The CUDA side of the outside project: attnkit's public headers under nvcc, and a kernel of this
// project writing into an attnkit Buffer that attnkit then copies back.
#include <attnkit/attnkit.h>

#include <cstdio>
#include <vector>

namespace {
__global__ void iota_kernel(float* g_x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) g_x[i] = static_cast<float>(i);
}
}  // namespace

bool device_roundtrip() {
  constexpr int kN = 1000;
  attnkit::Buffer buf(attnkit::Device::cuda, kN * sizeof(float));
  iota_kernel<<<(kN + 255) / 256, 256>>>(static_cast<float*>(buf.data()), kN);
  if (cudaDeviceSynchronize() != cudaSuccess) return false;
  std::vector<float> host(kN);
  buf.copy_to_host(host.data(), host.size() * sizeof(float));
  for (int i = 0; i < kN; ++i) {
    if (host[i] != static_cast<float>(i)) return false;
  }
  std::printf("a kernel of this project wrote an attnkit Buffer: ok\n");
  return true;
}
