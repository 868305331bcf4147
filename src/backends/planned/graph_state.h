// Device memory the `planned` backend plans into: two pinned staging buffers, used in turn, and
// their device twin, laid out by plan.h's PlanLayout and uploaded with one copy. A frozen arena (CUDA graphs) keeps
// its addresses for life, so a captured decode replays whatever plan was uploaded last.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/planned/page_table.h"
#include "backends/planned/plan.h"
#include "core/captured_graph.h"

typedef struct CUevent_st* cudaEvent_t;
typedef struct CUstream_st* cudaStream_t;
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

  // The staging buffer not used by the previous plan, once the upload out of it (two plans back)
  // has finished: planning never waits for the previous plan's copy. Each upload is marked by a
  // number the stream writes into a mapped host word after the copy, so the check is a load: on the
  // H200's hosts cudaEventSynchronize on a finished event took 1.3-1.6 us between plans, the write
  // 0.6-0.9 us more to enqueue than an event record (an event each upload where the driver offers
  // no stream memory operations).
  std::byte* begin_write();
  // One host-to-device copy of [begin, end) of the buffer begin_write gave, ordered on `stream`.
  void upload(size_t begin, size_t end, cudaStream_t stream);
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
  // Until the stream has written upload `number`'s mark (spinning briefly, then yielding).
  void wait_for_mark(uint32_t number) const;

  PlanCapacity capacity_;
  PlanLayout layout_;
  PageTableSlots page_slots_;
  void* device_ = nullptr;   // [layout_.total_bytes]
  void* staging_[2] = {};    // [layout_.total_bytes] pinned host memory each
  cudaEvent_t uploaded_[2] = {};
  bool pending_[2] = {};     // an upload out of staging_[i] may still be in flight
  uint32_t* done_ = nullptr;         // mapped pinned word: the number of the last upload finished
  uint32_t* done_device_ = nullptr;  // the same word, as the stream writes it
  uint32_t uploads_ = 0;             // uploads so far (numbered from 1; compared modulo 2^32)
  uint32_t read_by_[2] = {};         // the upload that last read staging_[i] (0: an event marks it)
  cudaStream_t stream_ = nullptr;    // the last marked upload's
  int current_ = 0;          // the buffer being written (begin_write's), next upload's source
  bool frozen_ = false;
  uint64_t generation_ = 0;
};

// A CUDA graph of a forward, for tests and callers without a CUDA runtime (core/captured_graph.h).
using CapturedGraph = cuda::CapturedGraph;

}  // namespace attnkit::planned
