#include "backends/jit/disk_cache.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace attnkit::jit {

namespace {

constexpr char kMagic[] = "attnkit-jit-cache 1\n";
constexpr size_t kMagicBytes = sizeof(kMagic) - 1;

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool get_u64(const std::string& in, size_t* pos, uint64_t* v) {
  if (in.size() - *pos < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<unsigned char>(in[*pos + i])} << (8 * i);
  *pos += 8;
  return true;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::filesystem::path DiskCache::default_dir() {
  if (const std::string d = env("ATTNKIT_CACHE_DIR"); !d.empty()) return d;
  if (const std::string d = env("XDG_CACHE_HOME"); !d.empty()) return std::filesystem::path(d) / "attnkit";
  if (const std::string d = env("HOME"); !d.empty()) return std::filesystem::path(d) / ".cache" / "attnkit";
  return {};
}

std::filesystem::path DiskCache::path_of(const std::string& key) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.bin", static_cast<unsigned long long>(fnv1a64(key)));
  return dir_ / name;
}

std::optional<std::vector<char>> DiskCache::load(const std::string& key) const {
  if (dir_.empty()) return std::nullopt;
  std::ifstream f(path_of(key), std::ios::binary);
  if (!f) return std::nullopt;
  const std::string in((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (in.size() < kMagicBytes || in.compare(0, kMagicBytes, kMagic) != 0) return std::nullopt;
  size_t pos = kMagicBytes;
  uint64_t key_bytes = 0, payload_bytes = 0, checksum = 0;
  if (!get_u64(in, &pos, &key_bytes) || in.size() - pos < key_bytes) return std::nullopt;
  if (in.compare(pos, key_bytes, key) != 0 || key_bytes != key.size()) return std::nullopt;  // another key
  pos += key_bytes;
  if (!get_u64(in, &pos, &payload_bytes) || in.size() - pos < payload_bytes) return std::nullopt;
  const std::string_view payload(in.data() + pos, payload_bytes);
  pos += payload_bytes;
  if (!get_u64(in, &pos, &checksum) || pos != in.size() || checksum != fnv1a64(payload)) return std::nullopt;
  return std::vector<char>(payload.begin(), payload.end());
}

bool DiskCache::store(const std::string& key, const std::vector<char>& payload) const {
  if (dir_.empty()) return false;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  std::string out(kMagic, kMagicBytes);
  put_u64(out, key.size());
  out += key;
  put_u64(out, payload.size());
  out.append(payload.data(), payload.size());
  put_u64(out, fnv1a64(std::string_view(payload.data(), payload.size())));
  // A name no other writer (process or thread) uses, in the same folder, so rename is atomic.
  static std::atomic<uint64_t> counter{0};
  const std::filesystem::path final_path = path_of(key);
  std::filesystem::path tmp = final_path;
  tmp += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f.write(out.data(), static_cast<std::streamsize>(out.size())) || !f.flush()) {
      std::filesystem::remove(tmp, ec);
      return false;
    }
  }
  std::filesystem::rename(tmp, final_path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace attnkit::jit
