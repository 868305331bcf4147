#include <algorithm>
// Read-pattern probe: 2 threads read a KV-like pool (slots of 8 heads x 256 B, K and V pools of
// 1 GiB each, on huge pages) in several orders, interleaved round by round so that the machine's
// slow and fast phases fall on all of them; medians over the rounds. Reads only, no arithmetic.
//   g++ -O2 -march=native -std=c++17 -pthread read_pattern.cc -o read_pattern && ./read_pattern
#include <immintrin.h>
#include <sys/mman.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
constexpr size_t kRow = 256, kHeads = 8, kSlot = kRow * kHeads;  // 2 KiB a slot
static __m512 touch(const char* p, size_t n, __m512 acc) {
  for (size_t o = 0; o < n; o += 64) acc = _mm512_add_ps(acc, _mm512_load_ps((const float*)(p + o)));
  return acc;
}
const size_t slots = size_t(1) << 19;  // 1 GiB per pool
const size_t bytes = slots * kSlot;
char* k; char* v;
float sink[32];
double run(int mode, int tile) {
  const int T = 2;
  double best = 0;
  for (int pass = 0; pass < 1; ++pass) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (int t = 0; t < T; ++t) th.emplace_back([&, t] {
      __m512 acc = _mm512_setzero_ps();
      const size_t s0 = slots / T * t, s1 = s0 + slots / T;
      if (mode == 7) {  // K token-major, V head-major with V prefetched 2 heads ahead
        for (size_t s = s0; s < s1; s += tile) {
          acc = touch(k + s * kSlot, tile * kSlot, acc);
          for (size_t h = 0; h < kHeads; ++h) {
            for (int j = 0; j < tile; ++j) {
              size_t hh = h + 2, ss = s + j;
              if (hh >= kHeads) { hh -= kHeads; ss += tile; }
              if (ss < s1) for (int o = 0; o < 256; o += 64) __builtin_prefetch(v + ss * kSlot + hh * kRow + o, 0, 1);
              acc = touch(v + (s + j) * kSlot + h * kRow, kRow, acc);
            }
          }
        }
      } else if (mode == 8) {  // K slot by slot, V head-major; a cursor prefetches slots (K then V lines) a tile ahead
        size_t cur = s0 + tile;
        int cur_line = 0;
        auto advance = [&](int lines) {
          for (; lines > 0 && cur < s1; --lines) {
            const char* base = (cur_line < 32 ? k : v) + cur * kSlot + (cur_line % 32) * 64;
            __builtin_prefetch(base, 0, 1);
            if (++cur_line == 64) { cur_line = 0; ++cur; }
          }
        };
        for (size_t s = s0; s < s1; s += tile) {
          for (int j = 0; j < tile; ++j) { acc = touch(k + (s + j) * kSlot, kSlot, acc); advance(32); }
          for (size_t h = 0; h < kHeads; ++h)
            for (int j = 0; j < tile; ++j) { acc = touch(v + (s + j) * kSlot + h * kRow, kRow, acc); advance(4); }
        }
      } else if (mode == 9 || mode == 10) {  // page-major (HND) pools: [page][head][16 slots][256 B]
        constexpr size_t kPageSlots = 16, kBlock = kPageSlots * kRow, kPage = kBlock * kHeads;  // 4 KiB, 32 KiB
        const size_t p0 = s0 / kPageSlots, p1 = s1 / kPageSlots, tp = tile / kPageSlots;
        for (size_t pg = p0; pg < p1; pg += tp) {
          for (char* pool : {k, v}) {
            for (size_t h = 0; h < kHeads; ++h) {
              for (size_t q = 0; q < tp; ++q) {
                const char* blk = pool + (pg + q) * kPage + h * kBlock;
                if (mode == 10) {  // the next head's block (or the next pool's / tile's first), a line per line read
                  size_t hh = h + 1, pp = pg + q; char* nx = pool;
                  if (hh == kHeads) { hh = 0; if (pool == k) nx = v; else pp += tp; }
                  if (pp < p1) {
                    const char* nb = nx + pp * kPage + hh * kBlock;
                    for (size_t o = 0; o < kBlock; o += 64) { __builtin_prefetch(nb + o, 0, 1); acc = _mm512_add_ps(acc, _mm512_load_ps((const float*)(blk + o))); }
                    continue;
                  }
                }
                acc = touch(blk, kBlock, acc);
              }
            }
          }
        }
      } else if (mode == 3) {  // token-major: a tile's K slots then V slots, each slot's heads in order
        for (size_t s = s0; s < s1; s += tile) {
          acc = touch(k + s * kSlot, tile * kSlot, acc);
          acc = touch(v + s * kSlot, tile * kSlot, acc);
        }
      } else if (mode == 0) {
        acc = touch(k + s0 * kSlot, (s1 - s0) * kSlot, acc);
        acc = touch(v + s0 * kSlot, (s1 - s0) * kSlot, acc);
      } else {
        for (size_t s = s0; s < s1; s += tile) {
          for (size_t h = 0; h < kHeads; ++h) {
            for (int j = 0; j < tile; ++j) {
              if (mode == 2) {
                size_t hh = h + 2, ss = s + j;
                if (hh >= kHeads) { hh -= kHeads; ss += tile; }
                if (ss < s1) for (int o = 0; o < 256; o += 64) {
                  __builtin_prefetch(k + ss * kSlot + hh * kRow + o, 0, 1);
                  __builtin_prefetch(v + ss * kSlot + hh * kRow + o, 0, 1);
                }
              }
              acc = touch(k + (s + j) * kSlot + h * kRow, kRow, acc);
            }
            for (int j = 0; j < tile; ++j) acc = touch(v + (s + j) * kSlot + h * kRow, kRow, acc);
            if (mode == 4) {  // the next tile in address order, a head's share a pass
              const size_t per = tile / kHeads;
              for (size_t j = h * per; j < (h + 1) * per; ++j) {
                const size_t ss = s + tile + j;
                if (ss >= s1) break;
                for (int o = 0; o < (int)kSlot; o += 64) {
                  __builtin_prefetch(k + ss * kSlot + o, 0, 1);
                  __builtin_prefetch(v + ss * kSlot + o, 0, 1);
                }
              }
            }
          }
        }
      }
      _mm512_storeu_ps(sink + 16 * t, acc);
    });
    for (auto& x : th) x.join();
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double gbs = 2.0 * bytes / sec / 1e9;
    if (gbs > best) best = gbs;
  }
  return best;
}
int main(int argc, char** argv) {
  k = (char*)aligned_alloc(1 << 21, bytes);
  v = (char*)aligned_alloc(1 << 21, bytes);
  madvise(k, bytes, MADV_HUGEPAGE); madvise(v, bytes, MADV_HUGEPAGE);
  memset(k, 1, bytes); memset(v, 1, bytes);
  // (mode, tile): 0 sequential; 1 head-major tiles; 2 the same with rows prefetched 2 heads
  // ahead (the cpu decode kernel's order); 4 head-major with the next tile prefetched in address
  // order; 7 K slot by slot, V head-major with V prefetched 2 heads ahead; 3 K and V slot by slot.
  const int cfg[][2] = {{0, 64}, {7, 64}, {9, 64}, {10, 64}, {9, 256}, {10, 256}};
  constexpr int C = 6;
  const int R = 7;
  std::vector<double> res[C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) res[c].push_back(run(cfg[c][0], cfg[c][1]));
  const double seq = [&] { auto v = res[0]; std::sort(v.begin(), v.end()); return v[R / 2]; }();
  for (int c = 0; c < C; ++c) {
    std::sort(res[c].begin(), res[c].end());
    printf("mode %d tile %3d: median %5.1f GB/s (q1 %5.1f, q3 %5.1f), %.2f of sequential\n", cfg[c][0], cfg[c][1],
           res[c][R / 2], res[c][R / 4], res[c][3 * R / 4], res[c][R / 2] / seq);
  }
}
