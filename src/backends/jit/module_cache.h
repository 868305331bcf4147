// Compiled kernels of the `jit` backend, by key: rendered, compiled with NVRTC (or read from the
// disk cache), loaded once per process and kept; a later call with the same key is a map lookup.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/jit/disk_cache.h"
#include "backends/jit/source.h"
#include "cuda/smem_opt_in.h"

namespace attnkit::jit {

struct CompiledKernel {
  const void* entry = nullptr;  // a cudaKernel_t, launched through cudaLaunchKernel
  const void* merge = nullptr;  // mma_tile's split-KV join; nullptr for warp_row
  const void* tile_mask = nullptr;  // mma_tile's once-a-batch mask_mod tile flags; nullptr without one
  int threads = 0;              // a CTA's
  int vo_passes = 1;            // CTAs a work item, each its share of the output columns (blockIdx.z)
  bool pdl = false;             // rendered with griddepcontrol (source.h: pdl_arch): merge launches with PDL
  size_t smem_bytes = 0;        // dynamic shared memory a launch asks for
  // The opt-in to smem_bytes, made on each device the kernel launches on (a cudaKernel_t is
  // loaded for every device, its attributes are set per device); shared by the copies.
  std::shared_ptr<cuda::SmemOptIn> smem_opt_in = std::make_shared<cuda::SmemOptIn>();
  int ctas_per_sm = 0;          // what the SM holds at once (the occupancy calculator's)
  double compile_ms = 0.0;      // NVRTC's time; 0 where the module came from the disk cache
  double load_ms = 0.0;         // the disk read and the module load
  bool from_disk = false;
};

// What compiling `key` for `arch` found: a cubin already on disk, or one compiled (and stored).
struct WarmResult {
  bool compiled = false;
  double ms = 0.0;
};

class ModuleCache {
 public:
  static ModuleCache& global();
  // Compiles `key` for `arch` into the disk cache unless it is there: no GPU needed, so a machine
  // without one can fill the cache that GPUs of that architecture then read (attnkit warmup).
  WarmResult warm(const KernelKey& key, const std::string& arch);
  const std::filesystem::path& disk_dir() const { return disk_.dir(); }
  // The kernel for `key` on the current device; throws attnkit::Error with NVRTC's log where the
  // source does not compile.
  const CompiledKernel& get(const KernelKey& key);
  // "sm_90" for the current device: compiled code is specific to it.
  static std::string device_arch();
  // From now on as a new process over the disk cache in `dir` would be: the kernels loaded so far
  // are set aside (kept alive: backends made before still hold them) and the next get() of each
  // key loads it from `dir` or compiles it there (jit_restart_caches).
  void restart(const std::filesystem::path& dir);

 private:
  ModuleCache();
  std::mutex mutex_;
  DiskCache disk_;
  std::map<std::string, CompiledKernel> kernels_;  // by the cache key text
  std::vector<std::map<std::string, CompiledKernel>> set_aside_;  // by restart(); map nodes do not move
};

}  // namespace attnkit::jit
