#include "backends/jit/module_cache.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

#include "attnkit/error.h"
#include "backends/jit/nvrtc.h"
#include "cuda/check.h"
#include "cuda/memory.h"

namespace attnkit::jit {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Compile options, part of the key. No fast math: expf, tanhf and division keep their IEEE
// accuracy, so the kernel computes the variants' expressions as the host evaluates them, up to
// the contraction of a multiply and an add into one FMA (stated, as it is NVRTC's default).
const std::vector<std::string>& options() {
  static const std::vector<std::string> o = {"--fmad=true"};
  return o;
}

}  // namespace

ModuleCache& ModuleCache::global() {
  static ModuleCache cache;
  return cache;
}

ModuleCache::ModuleCache() : disk_(DiskCache::default_dir()) {}

std::string ModuleCache::device_arch() {
  const cuda::DeviceInfo d = cuda::device_info();
  return "sm_" + std::to_string(d.compute_major) + std::to_string(d.compute_minor);
}

const CompiledKernel& ModuleCache::get(const KernelKey& key) {
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::get(&why);
  ATTNKIT_CHECK(nvrtc != nullptr, "jit: ", why);
  const std::string source = render_warp_row(key);
  const std::string arch = device_arch();
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fnv1a64(source)));
  std::string cache_key = std::string("attnkit jit module|") + arch + "|nvrtc " + nvrtc->version() + "|" + hash + "|";
  for (const std::string& o : options()) cache_key += o + " ";
  cache_key += "|" + source;  // the whole source: a hash collision cannot hand back another kernel

  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = kernels_.find(cache_key); it != kernels_.end()) return it->second;
  CompiledKernel k;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<char> cubin;
  if (auto hit = disk_.load(cache_key)) {
    cubin = std::move(*hit);
    k.from_disk = true;
  } else {
    cubin = nvrtc->compile_cubin(source, "jit " + key.describe(), arch, options());
    k.compile_ms = ms_since(t0);
    disk_.store(cache_key, cubin);  // a folder that cannot be written leaves the kernel in memory only
  }
  const auto t1 = std::chrono::steady_clock::now();
  cudaLibrary_t library = nullptr;
  ATTNKIT_CUDA_CHECK(cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t kernel = nullptr;
  ATTNKIT_CUDA_CHECK(cudaLibraryGetKernel(&kernel, library, "attend"));
  k.entry = reinterpret_cast<const void*>(kernel);
  k.load_ms = ms_since(k.from_disk ? t0 : t1);
  return kernels_.emplace(cache_key, k).first->second;
}

}  // namespace attnkit::jit
