#include "backends/jit/module_cache.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "attnkit/error.h"
#include "attnkit/jit.h"
#include "backends/jit/config.h"
#include "backends/jit/nvrtc.h"
#include "backends/jit/tuner.h"
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

// The disk cache's key: the architecture, NVRTC's version, the options and the whole source (a
// hash collision cannot hand back another kernel; the file name is the key's hash).
std::string module_key(const std::string& source, const std::string& arch, const Nvrtc& nvrtc) {
  char hash[32];
  std::snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(fnv1a64(source)));
  std::string key = std::string("attnkit jit module|") + arch + "|nvrtc " + nvrtc.version() + "|" + hash + "|";
  for (const std::string& o : options()) key += o + " ";
  return key + "|" + source;
}

const Nvrtc& nvrtc_or_throw() {
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::get(&why);
  ATTNKIT_CHECK(nvrtc != nullptr, "jit: ", why);
  return *nvrtc;
}

}  // namespace

WarmResult ModuleCache::warm(const KernelKey& key, const std::string& target) {
  const Nvrtc& nvrtc = nvrtc_or_throw();
  const std::string arch = compile_arch(key, target);  // what get() compiles for on a GPU of `target`
  const std::string source = render(key, arch);
  const std::string cache_key = module_key(source, arch, nvrtc);
  WarmResult r;
  const auto t0 = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (disk_.load(cache_key)) {
    r.ms = ms_since(t0);
    return r;
  }
  const std::vector<char> cubin = nvrtc.compile_cubin(source, "jit " + key.describe(), arch, options());
  ATTNKIT_CHECK(disk_.store(cache_key, cubin), "jit warmup: the cache folder '", disk_.dir().string(),
                "' cannot be written (set ATTNKIT_CACHE_DIR)");
  r.compiled = true;
  r.ms = ms_since(t0);
  return r;
}

ModuleCache& ModuleCache::global() {
  static ModuleCache cache;
  return cache;
}

ModuleCache::ModuleCache() : disk_(DiskCache::default_dir()) {}

void ModuleCache::restart(const std::filesystem::path& dir) {
  std::lock_guard<std::mutex> lock(mutex_);
  set_aside_.push_back(std::move(kernels_));
  kernels_.clear();
  disk_ = DiskCache(dir);
}

std::string ModuleCache::device_arch() {
  const cuda::DeviceInfo d = cuda::device_info();
  return "sm_" + std::to_string(d.compute_major) + std::to_string(d.compute_minor);
}

const CompiledKernel& ModuleCache::get(const KernelKey& key) {
  const Nvrtc* nvrtc = &nvrtc_or_throw();
  const std::string arch = compile_arch(key, device_arch());
  const std::string source = render(key, arch);
  const std::string cache_key = module_key(source, arch, *nvrtc);

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
  if (key.tensor_cores()) {
    cudaKernel_t merge = nullptr;
    ATTNKIT_CUDA_CHECK(cudaLibraryGetKernel(&merge, library, "merge"));
    k.merge = reinterpret_cast<const void*>(merge);
    if (!key.mask_mod.empty()) {
      cudaKernel_t tile_mask = nullptr;
      ATTNKIT_CUDA_CHECK(cudaLibraryGetKernel(&tile_mask, library, "tile_mask"));
      k.tile_mask = reinterpret_cast<const void*>(tile_mask);
    }
    k.threads = key.tile.threads();
    k.vo_passes = key.vo_passes();
    k.pdl = pdl_arch(arch);
    k.smem_bytes = tile_smem_bytes(key);
    k.smem_opt_in->ensure(k.entry, static_cast<int>(k.smem_bytes));  // here for the occupancy query below
  } else {
    k.threads = kWarpRowThreads;
  }
  ATTNKIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&k.ctas_per_sm, k.entry, k.threads, k.smem_bytes));
  k.load_ms = ms_since(k.from_disk ? t0 : t1);
  return kernels_.emplace(cache_key, k).first->second;
}

}  // namespace attnkit::jit

namespace attnkit {

std::vector<JitWarmup> jit_warmup(const ModelSpec& model, const KvCacheConfig& cache, DType q_dtype,
                                  const std::string& arch,
                                  const std::function<void(const JitWarmup&, int, int)>& progress) {
  std::vector<jit::KernelKey> keys;
  // Every tile the tuner may measure, for decode- and prefill-shaped batches alike.
  const auto add = [&keys](const jit::KernelKey& k) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  };
  const std::string target = arch.empty() ? jit::ModuleCache::device_arch() : arch;
  for (int l = 0; l < model.num_layers(); ++l) {
    jit::KernelKey k = jit::kernel_key_for(model.layer(l), cache, q_dtype);
    if (!k.tensor_cores()) {
      add(k);
      continue;
    }
    for (bool decode : {true, false}) {
      for (const jit::TileConfig& t : jit::tile_candidates(k, decode, target)) {
        k.tile = t;
        add(k);
      }
    }
  }
  std::vector<JitWarmup> done;
  for (const jit::KernelKey& k : keys) {
    const jit::WarmResult r = jit::ModuleCache::global().warm(k, target);
    done.push_back({k.describe() + " for " + target, r.compiled, r.ms});
    if (progress) progress(done.back(), static_cast<int>(done.size()), static_cast<int>(keys.size()));
  }
  return done;
}

std::string jit_cache_dir() { return jit::ModuleCache::global().disk_dir().string(); }

void jit_restart_caches(const std::string& dir) {
  jit::ModuleCache::global().restart(dir);
  jit::TileTuner::global().restart(dir);
}

}  // namespace attnkit
