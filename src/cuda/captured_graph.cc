#include "core/captured_graph.h"

#include <cuda_runtime.h>

#include "cuda/check.h"

namespace attnkit::cuda {

CapturedGraph::~CapturedGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
}

void CapturedGraph::capture(const std::function<void()>& body) {
  ATTNKIT_CHECK(graph_ == nullptr, "CapturedGraph: already captured");
  ATTNKIT_CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(cudaStreamPerThread, &broken);  // leave the stream usable, then rethrow
    if (broken) cudaGraphDestroy(broken);
    throw;
  }
  ATTNKIT_CUDA_CHECK(cudaStreamEndCapture(cudaStreamPerThread, &graph_));
  ATTNKIT_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CapturedGraph::replay() {
  ATTNKIT_CHECK(exec_ != nullptr, "CapturedGraph: replay before capture");
  ATTNKIT_CUDA_CHECK(cudaGraphLaunch(exec_, cudaStreamPerThread));
}

}  // namespace attnkit::cuda
