// A CUDA graph of what a callable enqueues on the calling thread's default stream (the stream the
// backends and the cache store use), replayed on that stream. Lives in the library, so callers
// need no CUDA runtime of their own: cuda/captured_graph.cc in a CUDA build, else
// core/captured_graph_none.cc, which throws saying so (the GPU tests that use it skip first).
#pragma once

#include <functional>

typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace attnkit::cuda {

class CapturedGraph {
 public:
  CapturedGraph() = default;
  ~CapturedGraph();
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void capture(const std::function<void()>& body);
  void replay();

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace attnkit::cuda
