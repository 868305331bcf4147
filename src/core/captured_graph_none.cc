// CapturedGraph in a build without CUDA: there is no stream to capture or replay on, so both say
// why (the GPU tests that use it skip themselves before).
#include "attnkit/error.h"
#include "core/captured_graph.h"

namespace attnkit::cuda {

namespace {
[[noreturn]] void no_cuda() {
  throw Error("CapturedGraph: this attnkit was built without CUDA (ATTNKIT_WITH_CUDA=OFF)");
}
}  // namespace

CapturedGraph::~CapturedGraph() = default;
void CapturedGraph::capture(const std::function<void()>&) { no_cuda(); }
void CapturedGraph::replay() { no_cuda(); }

}  // namespace attnkit::cuda
