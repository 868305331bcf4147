// Without NCCL (a CPU build, or CMake found no nccl.h): the NCCL entry points say so.
#include "attnkit/communicator.h"
#include "attnkit/error.h"

namespace attnkit {
namespace {
constexpr const char* kNoNccl =
    "nccl: attnkit was built without NCCL (a CUDA build where CMake finds nccl.h)";
}  // namespace

bool nccl_available() { return false; }
NcclId make_nccl_id() { throw Error(kNoNccl); }
std::unique_ptr<Communicator> make_nccl_communicator(int, int, const NcclId&) { throw Error(kNoNccl); }

}  // namespace attnkit
