// Device memory the `planned` backend plans into: two pinned staging buffers, used in turn
// (cuda/staged_upload.h), and their device twin, laid out by plan.h's PlanLayout and uploaded with one copy. A frozen arena (CUDA graphs) keeps
// its addresses for life, so a captured decode replays whatever plan was uploaded last.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/planned/page_table.h"
#include "backends/planned/plan.h"
#include "core/captured_graph.h"
#include "cuda/staged_upload.h"

typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace attnkit::planned {

class PlanArena {
 public:
  PlanArena() = default;
  ~PlanArena();
  PlanArena(const PlanArena&) = delete;
  PlanArena& operator=(const PlanArena&) = delete;

  // Makes room for `need` (growing by half again, so a slowly growing batch reallocates rarely).
  // A frozen arena never moves: it answers whether `need` fits.
  bool reserve(const PlanCapacity& need, const PlanShape& shape, int num_variants);
  // Allocates exactly `capacity` and freezes the arena (init_cuda_graph_state).
  void freeze(const PlanCapacity& capacity, const PlanShape& shape, int num_variants);
  bool frozen() const { return frozen_; }

  // The staging buffer not used by the previous plan, once the upload out of it has finished
  // (StagedUpload::begin_write), and one host-to-device copy of [begin, end) of it, ordered on `stream`.
  std::byte* begin_write() { return staging_.begin_write(); }
  void upload(size_t begin, size_t end, cudaStream_t stream) { staging_.upload(device_, begin, end, stream); }
  // Counts allocations: the device buffer holds a plan uploaded at this generation only.
  uint64_t generation() const { return generation_; }

  const PlanLayout& layout() const { return layout_; }
  // Where the staging buffers' page tables keep each request's entries (both buffers alike).
  PageTableSlots& page_slots() { return page_slots_; }
  const PlanCapacity& capacity() const { return capacity_; }
  template <typename T>
  T* device(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(device_) + offset);
  }
  size_t bytes() const { return layout_.total_bytes; }

 private:
  void allocate(const PlanCapacity& capacity, const PlanShape& shape, int num_variants);
  void release() noexcept;

  PlanCapacity capacity_;
  PlanLayout layout_;
  PageTableSlots page_slots_;
  void* device_ = nullptr;      // [layout_.total_bytes]
  cuda::StagedUpload staging_;  // [layout_.total_bytes] each
  bool frozen_ = false;
  uint64_t generation_ = 0;
};

// A CUDA graph of a forward, for tests and callers without a CUDA runtime (core/captured_graph.h).
using CapturedGraph = cuda::CapturedGraph;

}  // namespace attnkit::planned
