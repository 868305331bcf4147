#include "backends/jit/tuner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "attnkit/dtype.h"
#include "attnkit/error.h"
#include "backends/jit/config.h"
#include "backends/jit/nvrtc.h"

namespace attnkit::jit {

namespace {

int log2_ceil(int64_t n) { return n <= 1 ? 0 : 64 - std::countl_zero(static_cast<uint64_t>(n - 1)); }

std::optional<TileConfig> pinned() {
  const char* text = std::getenv("ATTNKIT_JIT_TILE");
  if (text == nullptr || *text == '\0') return {};
  const std::optional<TileConfig> t = TileConfig::parse(text);
  ATTNKIT_CHECK(t.has_value(), "ATTNKIT_JIT_TILE: '", text, "' is not a tile; expected e.g. \"n64 w4x1 m1 s2\"");
  return t;
}

}  // namespace

std::string shape_bucket(bool decode, int64_t packed_rows, int64_t kv_tokens) {
  return detail::concat(decode ? "decode" : "prefill", " rows 2^", log2_ceil(packed_rows), " kv 2^", log2_ceil(kv_tokens));
}

bool outputs_agree(const std::vector<uint16_t>& first, const std::vector<uint16_t>& candidate, bool bf16) {
  if (first.size() != candidate.size()) return false;
  const auto value = [bf16](uint16_t bits) { return bf16 ? bf16_bits_to_float(bits) : f16_bits_to_float(bits); };
  float largest = 0.0f;
  for (uint16_t b : first) {
    const float x = std::fabs(value(b));
    if (std::isfinite(x)) largest = std::max(largest, x);
  }
  const float bound = std::ldexp(std::max(largest, 1e-30f), -6);
  for (size_t i = 0; i < first.size(); ++i) {
    const float a = value(first[i]), b = value(candidate[i]);
    if (a == b) continue;
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) return false;
      continue;
    }
    if (!(std::fabs(a - b) <= bound)) return false;  // an infinity against a finite value fails too
  }
  return true;
}

TileTuner& TileTuner::global() {
  static TileTuner tuner(DiskCache::default_dir());
  return tuner;
}

TileTuner::TileTuner(std::filesystem::path dir) : disk_(std::move(dir)) {}

void TileTuner::restart(const std::filesystem::path& dir) {
  std::lock_guard<std::mutex> lock(mutex_);
  chosen_.clear();
  disk_ = DiskCache(dir);
}

TileConfig TileTuner::choose(const KernelKey& base, const std::string& bucket, const std::string& arch, bool decode,
                             const std::function<double(const TileConfig&)>& measure, bool* tuned) {
  if (tuned) *tuned = false;
  const std::vector<TileConfig> candidates = tile_candidates(base, decode, arch);
  ATTNKIT_CHECK(!candidates.empty(), "jit: no tile of the template fits ", base.describe(), " in shared memory");
  if (const std::optional<TileConfig> t = pinned()) {
    KernelKey k = base;
    k.tile = *t;
    ATTNKIT_CHECK(tile_fits_shared_memory(k) && t->block_n % (16 * t->warps_n) == 0 &&
                      (!t->wgmma || wgmma_serves(base, arch)),
                  "ATTNKIT_JIT_TILE: '", t->describe(), "' does not fit ", base.describe());
    return *t;
  }
  KernelKey canonical = base;
  canonical.tile = TileConfig{};
  std::string why;
  const Nvrtc* nvrtc = Nvrtc::get(&why);
  const std::string key = detail::concat("attnkit jit tile|", arch, "|nvrtc ", nvrtc ? nvrtc->version() : "none", "|",
                                         canonical.describe(), "|", bucket);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = chosen_.find(key); it != chosen_.end()) return it->second;
  if (auto hit = disk_.load(key)) {
    if (auto t = TileConfig::parse(std::string(hit->begin(), hit->end()))) {
      if (std::find(candidates.begin(), candidates.end(), *t) != candidates.end()) return chosen_[key] = *t;
    }
  }
  TileConfig best = candidates.front();
  double best_ms = std::numeric_limits<double>::infinity();
  // A candidate that cannot run here (infinity) is passed over; if none can, the first is kept.
  const bool log = std::getenv("ATTNKIT_JIT_LOG") != nullptr;
  std::string line;
  for (const TileConfig& t : candidates) {
    const double ms = measure(t);
    if (ms < best_ms) best_ms = ms, best = t;
    if (log) line += detail::concat(line.empty() ? "" : ", ", t.describe(), " ", ms, " ms");
  }
  if (log) std::fprintf(stderr, "jit tune %s, %s: %s -> %s\n", canonical.describe().c_str(), bucket.c_str(), line.c_str(), best.describe().c_str());
  if (tuned) *tuned = true;
  const std::string text = best.describe();
  disk_.store(key, std::vector<char>(text.begin(), text.end()));  // unwritable: kept in memory only
  return chosen_[key] = best;
}

}  // namespace attnkit::jit
