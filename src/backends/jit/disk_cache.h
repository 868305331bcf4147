// The `jit` backend's disk cache: compiled modules (and later tuning choices) kept across
// processes, one file an entry, named by a hash of the entry's key text; the key is the rendered
// source's hash, the compile options, the GPU architecture and the NVRTC version, so a change of
// any of them is a miss. Entries are written to a temporary file and renamed into place (atomic
// on POSIX file systems, so several processes may fill the cache at once: the last rename wins,
// and every reader sees a whole entry). A reader checks the entry's magic, its full key text,
// its lengths and a checksum of the payload: a corrupt or colliding entry is a miss, and the
// caller rebuilds and overwrites it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnkit::jit {

// 64-bit FNV-1a: stable across processes and builds (std::hash is not).
uint64_t fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);

class DiskCache {
 public:
  explicit DiskCache(std::filesystem::path dir) : dir_(std::move(dir)) {}
  // $ATTNKIT_CACHE_DIR, else $XDG_CACHE_HOME/attnkit, else $HOME/.cache/attnkit; empty where
  // none is set (the cache is then off).
  static std::filesystem::path default_dir();

  // The payload stored under `key`, or nothing (absent, unreadable, corrupt, another key).
  std::optional<std::vector<char>> load(const std::string& key) const;
  // Stores `payload` under `key`, replacing any entry; false (and nothing left behind) where the
  // folder cannot be written: a cache that cannot persist still serves from memory.
  bool store(const std::string& key, const std::vector<char>& payload) const;

  std::filesystem::path path_of(const std::string& key) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace attnkit::jit
