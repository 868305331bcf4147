// The `jit` backend's autotuner: for a kernel key (its tile aside) and a shape bucket, the tile
// configuration to run, found once by measuring every candidate (config.h: tile_candidates) on the
// batch at hand and keeping the fastest, in memory and in the disk cache beside the modules (keyed
// by the architecture and NVRTC's version too), so later processes start tuned.
// ATTNKIT_JIT_TILE="n64 w4x1 m1 s2" pins one tile instead (no measuring), for every key it fits;
// ATTNKIT_JIT_LOG=1 prints each measurement and the choice to stderr.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backends/jit/disk_cache.h"
#include "backends/jit/source.h"

namespace attnkit::jit {

// The bucket a batch falls in: its phase shape and the powers of two of its rows and keys.
std::string shape_bucket(bool decode, int64_t packed_rows, int64_t kv_tokens);

// Whether a candidate tile's output (16-bit bits, bf16 or f16) agrees with the first candidate's on
// the same call: each element within 2^-6 of the first's largest magnitude (two tiles round and
// sum in different orders: a few units of the 16-bit format), NaN exactly where it is NaN. The
// backend passes a tile that disagrees over, however fast: the race picks speed, not answers.
bool outputs_agree(const std::vector<uint16_t>& first, const std::vector<uint16_t>& candidate, bool bf16);

class TileTuner {
 public:
  static TileTuner& global();  // over DiskCache::default_dir()
  explicit TileTuner(std::filesystem::path dir);
  // `measure` returns a candidate's time in ms (infinity where it cannot run); called only when
  // the choice is neither pinned, remembered nor on disk. `tuned`, where given, is set to whether
  // measuring happened now.
  TileConfig choose(const KernelKey& base, const std::string& bucket, const std::string& arch, bool decode,
                    const std::function<double(const TileConfig&)>& measure, bool* tuned = nullptr);

  // From now on as a new process over the tuning choices on disk in `dir` would be: those kept
  // in memory are forgotten (jit_restart_caches).
  void restart(const std::filesystem::path& dir);

 private:
  std::mutex mutex_;
  DiskCache disk_;
  std::map<std::string, TileConfig> chosen_;
};

}  // namespace attnkit::jit
