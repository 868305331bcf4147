// Collectives between the ranks of a context-parallel group: the interface, the in-process group
// (every rank in one process) and the NCCL communicator (one rank a GPU; built where NCCL is found).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "attnkit/dtype.h"

namespace attnkit {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Where all_gather's buffers live: cuda for NCCL; the in-process group's is its own choice.
  virtual Device device() const = 0;
  // recv [size() * bytes] gets every rank's send [bytes], rank r's at offset r * bytes; every rank
  // passes the same size. On cuda: device memory, queued on `stream` (a cudaStream_t; null: the
  // calling thread's default stream), complete in that stream's order.
  virtual void all_gather_bytes(const void* send, void* recv, size_t bytes, void* stream = nullptr) = 0;
  // The same for `count` floats a rank.
  void all_gather(const float* send, float* recv, int64_t count, void* stream = nullptr) {
    all_gather_bytes(send, recv, static_cast<size_t>(count) * sizeof(float), stream);
  }
};

// `size` ranks in one process, run one after another on one thread (not thread-safe). A collective
// completes when the last rank has made its call: recv of every rank is written then, so a rank's
// step is split at the collective (ContextParallelDecode: attend, then merge), and the step reads
// recv only after every rank has run its part up to there.
//
// On Device::cpu the buffers are host memory and copied at once. On Device::cuda they are device
// memory (the ranks share one GPU) and every copy is queued on the stream the ranks pass, one
// stream for all of a round's calls, with no wait on the host: each rank's send is copied aside at
// its call (so work queued after the call may rewrite it), and the gathered bytes into every
// rank's recv at the last call. The sends are gathered in a buffer the group keeps, allocated at
// the first call of a round larger than any before: a round captured into a CUDA graph must come
// after one of its size run outside the capture (refused otherwise), and the graph copies through
// that buffer until a larger round replaces it.
//
// Why sequential ranks and not a thread a rank with a barrier: it is the simpler that is correct
// here. The ranks share what one-rank programs share (the cpu backend's process-wide thread pool,
// one device), runs are deterministic, and the order in which a rank calls attend and then merge is
// the one the NCCL path keeps in stream order anyway.
class InProcessGroup {
 public:
  // Throws attnkit::Error for size < 1.
  explicit InProcessGroup(int size, Device device = Device::cpu);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const { return static_cast<int>(ranks_.size()); }
  Device device() const;
  Communicator& rank(int r);

 private:
  class Rank;
  struct Round;
  std::unique_ptr<Round> round_;
  std::vector<std::unique_ptr<Rank>> ranks_;
};

// NCCL: one rank a GPU (each process or thread sets its device first). Rank 0 makes the id with
// make_nccl_id() and hands it to every rank out of band; make_nccl_communicator joins the group.
// Where attnkit was built without NCCL, both throw attnkit::Error saying so.
struct NcclId {
  std::array<char, 128> bytes{};  // NCCL_UNIQUE_ID_BYTES
};
bool nccl_available();
NcclId make_nccl_id();
std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, const NcclId& id);

}  // namespace attnkit
