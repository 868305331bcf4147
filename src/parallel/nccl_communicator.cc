// The NCCL communicator: one rank a GPU, ncclAllGather on the caller's CUDA stream. Compiled where
// the CUDA build is on and CMake finds nccl.h and libnccl (src/parallel/CMakeLists.txt); else
// nccl_none.cc stands in.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>

#include "attnkit/communicator.h"
#include "attnkit/error.h"

namespace attnkit {
namespace {

static_assert(sizeof(NcclId::bytes) == NCCL_UNIQUE_ID_BYTES, "NcclId must hold exactly one ncclUniqueId");

#define ATTNKIT_NCCL_CHECK(expr)                                         \
  do {                                                                   \
    const ncclResult_t attnkit_nccl_result = (expr);                     \
    ATTNKIT_CHECK(attnkit_nccl_result == ncclSuccess, "nccl: ", #expr,   \
                  " failed: ", ncclGetErrorString(attnkit_nccl_result)); \
  } while (0)

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int size, const NcclId& id) : rank_(rank), size_(size) {
    ATTNKIT_CHECK(size >= 1, "nccl communicator: size (the number of ranks) must be >= 1, got ", size);
    ATTNKIT_CHECK(rank >= 0 && rank < size, "nccl communicator: rank must be in 0..", size - 1, ", got ", rank);
    ncclUniqueId unique;
    std::copy(id.bytes.begin(), id.bytes.end(), unique.internal);
    ATTNKIT_NCCL_CHECK(ncclCommInitRank(&comm_, size, unique, rank));
  }
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cuda; }

  void all_gather_bytes(const void* send, void* recv, size_t bytes, void* stream) override {
    // The library's own launches go to the per-thread default stream: null means that one here too.
    cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamPerThread;
    ATTNKIT_NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm_, s));
  }

 private:
  int rank_;
  int size_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() { return true; }

NcclId make_nccl_id() {
  ncclUniqueId unique;
  ATTNKIT_NCCL_CHECK(ncclGetUniqueId(&unique));
  NcclId id;
  std::copy(unique.internal, unique.internal + NCCL_UNIQUE_ID_BYTES, id.bytes.begin());
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, const NcclId& id) {
  return std::make_unique<NcclCommunicator>(rank, size, id);
}

}  // namespace attnkit
