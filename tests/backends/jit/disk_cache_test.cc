// The jit disk cache: round trips, misses for another key, corrupt and truncated entries, the
// folder's resolution, and writers that leave no temporary file behind.
#include "backends/jit/disk_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <thread>

namespace attnkit::jit {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("attnkit-cache-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::remove_all(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

TEST(JitDiskCache, Fnv1aKnownValues) {
  // The published FNV-1a 64-bit test vectors.
  EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ULL);
}

TEST(JitDiskCache, RoundTripAndMisses) {
  TempDir dir;
  const DiskCache cache(dir.path / "nested");
  EXPECT_FALSE(cache.load("k1").has_value());
  ASSERT_TRUE(cache.store("k1", bytes("cubin one")));
  ASSERT_TRUE(cache.store("k2", bytes(std::string("with\0zero", 9))));
  EXPECT_EQ(cache.load("k1").value(), bytes("cubin one"));
  EXPECT_EQ(cache.load("k2").value(), bytes(std::string("with\0zero", 9)));
  EXPECT_FALSE(cache.load("k3").has_value());
  ASSERT_TRUE(cache.store("k1", bytes("replaced")));
  EXPECT_EQ(cache.load("k1").value(), bytes("replaced"));
  for (const auto& e : fs::directory_iterator(dir.path / "nested")) {
    EXPECT_EQ(e.path().extension(), ".bin") << "left behind: " << e.path();
  }
}

TEST(JitDiskCache, CorruptTruncatedOrForeignEntriesAreMisses) {
  TempDir dir;
  const DiskCache cache(dir.path);
  ASSERT_TRUE(cache.store("key", bytes("payload bytes")));
  const fs::path p = cache.path_of("key");
  std::string good;
  {
    std::ifstream f(p, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  auto rewrite = [&](const std::string& content) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f << content;
  };
  std::string flipped = good;
  flipped[flipped.size() - 12] ^= 0x01;  // a payload byte
  rewrite(flipped);
  EXPECT_FALSE(cache.load("key").has_value());
  rewrite(good.substr(0, good.size() - 3));
  EXPECT_FALSE(cache.load("key").has_value());
  rewrite("not a cache entry");
  EXPECT_FALSE(cache.load("key").has_value());
  rewrite(good + "x");
  EXPECT_FALSE(cache.load("key").has_value());
  // The same file name reached by another key (a hash collision) is a miss, not its payload.
  rewrite(good);
  const DiskCache other(dir.path);
  fs::copy_file(p, other.path_of("other key"), fs::copy_options::overwrite_existing);
  EXPECT_FALSE(other.load("other key").has_value());
  EXPECT_EQ(cache.load("key").value(), bytes("payload bytes"));
}

TEST(JitDiskCache, ConcurrentWritersLeaveOneWholeEntry) {
  TempDir dir;
  const DiskCache cache(dir.path);
  std::vector<std::thread> writers;
  for (int t = 0; t < 8; ++t) {
    writers.emplace_back([&cache, t] {
      for (int i = 0; i < 20; ++i) cache.store("shared", bytes(std::string(1000 + t, static_cast<char>('a' + t))));
    });
  }
  for (auto& w : writers) w.join();
  const auto got = cache.load("shared");
  ASSERT_TRUE(got.has_value());
  ASSERT_GE(got->size(), 1000u);
  EXPECT_EQ(got->size(), 1000u + static_cast<size_t>((*got)[0] - 'a'));
}

TEST(JitDiskCache, UnwritableFolderIsNoError) {
  const DiskCache cache("/proc/attnkit-cannot-write-here");
  EXPECT_FALSE(cache.store("k", bytes("x")));
  EXPECT_FALSE(cache.load("k").has_value());
  EXPECT_FALSE(DiskCache(fs::path()).store("k", bytes("x")));
}

TEST(JitDiskCache, DefaultFolder) {
  const char* saved[3] = {std::getenv("ATTNKIT_CACHE_DIR"), std::getenv("XDG_CACHE_HOME"), std::getenv("HOME")};
  const std::string keep[3] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : "", saved[2] ? saved[2] : ""};
  ::setenv("HOME", "/home/u", 1);
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("ATTNKIT_CACHE_DIR");
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/home/u/.cache/attnkit"));
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/xdg/attnkit"));
  ::setenv("ATTNKIT_CACHE_DIR", "/mine", 1);
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/mine"));
  const char* names[3] = {"ATTNKIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  for (int i = 0; i < 3; ++i) {
    if (saved[i]) ::setenv(names[i], keep[i].c_str(), 1);
    else ::unsetenv(names[i]);
  }
}

}  // namespace
}  // namespace attnkit::jit
