// What the jit host tests share: a key of a given shape, and NVRTC compiling many keys' sources.
#pragma once

#include <thread>
#include <vector>

#include "backends/jit/nvrtc.h"
#include "backends/jit/source.h"

namespace attnkit::jit::testing {

inline KernelKey make_key(int dk, int dv, int group, int page, DType q, DType kv, TileConfig tile = {}) {
  KernelKey k;
  k.head_dim_qk = dk;
  k.head_dim_vo = dv;
  k.group = group;
  k.page_size = page;
  k.dtype = q;
  k.kv_dtype = kv;
  k.tile = tile;
  return k;
}

// Each key's cubin size, its sm_90a source (with the PDL lines, as the backend renders it there)
// compiled for sm_90a two at a time (NVRTC is thread-safe): the suite's time, not the check, is halved.
inline std::vector<size_t> compiled_sizes(const Nvrtc& nvrtc, const std::vector<KernelKey>& keys) {
  std::vector<size_t> sizes(keys.size());
  auto compile_from = [&](size_t first) {
    for (size_t i = first; i < keys.size(); i += 2) sizes[i] = nvrtc.compile_cubin(render(keys[i], "sm_90a"), keys[i].describe(), "sm_90a", {}).size();
  };
  std::thread other(compile_from, 1);
  compile_from(0);
  other.join();
  return sizes;
}

}  // namespace attnkit::jit::testing
