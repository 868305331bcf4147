// The NCCL communicator: one rank a GPU, ncclAllGather on the caller's CUDA stream. Compiled where
// the CUDA build is on and CMake finds nccl.h (src/parallel/CMakeLists.txt); else nccl_none.cc
// stands in. libnccl is opened at run time (dlopen), like NVRTC for `jit`: libattnkit links no
// CUDA library but the runtime, and a machine without NCCL is told so when it asks for it.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "attnkit/communicator.h"
#include "attnkit/error.h"

namespace attnkit {
namespace {

static_assert(sizeof(NcclId::bytes) == NCCL_UNIQUE_ID_BYTES, "NcclId must hold exactly one ncclUniqueId");

// The entry points used, from libnccl.so.2; null members where it could not be opened.
struct Nccl {
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  std::string why_not;  // empty once every entry point is found
};

const Nccl& nccl() {
  static const Nccl lib = [] {
    Nccl n;
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* err = dlerror();
      n.why_not = std::string("nccl: libnccl.so.2 could not be opened (") + (err ? err : "not found") + ")";
      return n;
    }
    auto find = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr && n.why_not.empty()) n.why_not = std::string("nccl: libnccl has no ") + name;
    };
    find(n.get_unique_id, "ncclGetUniqueId");
    find(n.comm_init_rank, "ncclCommInitRank");
    find(n.comm_destroy, "ncclCommDestroy");
    find(n.all_gather, "ncclAllGather");
    find(n.error_string, "ncclGetErrorString");
    return n;
  }();
  ATTNKIT_CHECK(lib.why_not.empty(), lib.why_not);
  return lib;
}

#define ATTNKIT_NCCL_CHECK(expr)                                         \
  do {                                                                   \
    const ncclResult_t attnkit_nccl_result = (expr);                     \
    ATTNKIT_CHECK(attnkit_nccl_result == ncclSuccess, "nccl: ", #expr,   \
                  " failed: ", nccl().error_string(attnkit_nccl_result)); \
  } while (0)

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int size, const NcclId& id) : rank_(rank), size_(size) {
    ATTNKIT_CHECK(size >= 1, "nccl communicator: size (the number of ranks) must be >= 1, got ", size);
    ATTNKIT_CHECK(rank >= 0 && rank < size, "nccl communicator: rank must be in 0..", size - 1, ", got ", rank);
    ncclUniqueId unique;
    std::copy(id.bytes.begin(), id.bytes.end(), unique.internal);
    ATTNKIT_NCCL_CHECK(nccl().comm_init_rank(&comm_, size, unique, rank));
  }
  ~NcclCommunicator() override { nccl().comm_destroy(comm_); }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cuda; }

  void all_gather_bytes(const void* send, void* recv, size_t bytes, void* stream) override {
    // The library's own launches go to the per-thread default stream: null means that one here too.
    cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : cudaStreamPerThread;
    ATTNKIT_NCCL_CHECK(nccl().all_gather(send, recv, bytes, ncclUint8, comm_, s));
  }

 private:
  int rank_;
  int size_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() {
  try {
    nccl();
    return true;
  } catch (const Error&) {
    return false;
  }
}

NcclId make_nccl_id() {
  ncclUniqueId unique;
  ATTNKIT_NCCL_CHECK(nccl().get_unique_id(&unique));
  NcclId id;
  std::copy(unique.internal, unique.internal + NCCL_UNIQUE_ID_BYTES, id.bytes.begin());
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int size, const NcclId& id) {
  return std::make_unique<NcclCommunicator>(rank, size, id);
}

}  // namespace attnkit
