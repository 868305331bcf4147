// PlanArena: pinned staging buffers + device buffer, the one upload a plan needs, and the events
// that keep a plan from overwriting staging bytes a copy is still reading.
#include "backends/planned/graph_state.h"

#include <algorithm>

#include "cuda/check.h"

namespace attnkit::planned {

PlanArena::~PlanArena() { release(); }

void PlanArena::release() noexcept {
  // Destructors must not throw: errors here are ignored (the context may already be gone).
  for (int i = 0; i < 2; ++i) {
    if (uploaded_[i]) {
      cudaEventSynchronize(uploaded_[i]);
      cudaEventDestroy(uploaded_[i]);
    }
    if (staging_[i]) cudaFreeHost(staging_[i]);
    uploaded_[i] = nullptr;
    staging_[i] = nullptr;
    pending_[i] = false;
  }
  if (device_) cudaFree(device_);
  device_ = nullptr;
}

void PlanArena::allocate(const PlanCapacity& capacity, const PlanShape& shape, int num_variants) {
  release();
  ++generation_;
  capacity_ = capacity;
  layout_ = make_layout(capacity, shape, num_variants);
  page_slots_.reset();
  const size_t bytes = std::max<size_t>(layout_.total_bytes, 16);
  ATTNKIT_CUDA_CHECK(cudaMalloc(&device_, bytes));
  for (int i = 0; i < 2; ++i) {
    ATTNKIT_CUDA_CHECK(cudaMallocHost(&staging_[i], bytes));
    ATTNKIT_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_[i], cudaEventDisableTiming));
  }
}

bool PlanArena::reserve(const PlanCapacity& need, const PlanShape& shape, int num_variants) {
  // The shape and the variant count are the backend's, fixed for the arena's life.
  if (device_ != nullptr && capacity_.fits(need)) return true;
  if (frozen_) return false;
  auto grow = [](auto have, auto want) { return want <= have ? have : std::max(want, have + have / 2); };
  PlanCapacity c;
  c.batch_size = grow(capacity_.batch_size, need.batch_size);
  c.num_pages = grow(capacity_.num_pages, need.num_pages);
  c.num_tokens = grow(capacity_.num_tokens, need.num_tokens);
  c.mask_bytes = grow(capacity_.mask_bytes, need.mask_bytes);
  c.decode_items = grow(capacity_.decode_items, need.decode_items);
  c.prefill_items = grow(capacity_.prefill_items, need.prefill_items);
  allocate(c, shape, num_variants);
  return true;
}

void PlanArena::freeze(const PlanCapacity& capacity, const PlanShape& shape, int num_variants) {
  frozen_ = false;
  allocate(capacity, shape, num_variants);
  frozen_ = true;
}

std::byte* PlanArena::begin_write() {
  current_ ^= 1;
  if (pending_[current_]) {
    ATTNKIT_CUDA_CHECK(cudaEventSynchronize(uploaded_[current_]));
    pending_[current_] = false;
  }
  return static_cast<std::byte*>(staging_[current_]);
}

void PlanArena::upload(size_t begin, size_t end, cudaStream_t stream) {
  ATTNKIT_CHECK(begin <= end && end <= layout_.total_bytes, "planned plan: upload of bytes [", begin, ", ", end,
                ") exceeds the buffer (", layout_.total_bytes, ")");
  if (begin == end) return;
  ATTNKIT_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(device_) + begin,
                                     static_cast<const std::byte*>(staging_[current_]) + begin, end - begin,
                                     cudaMemcpyHostToDevice, stream));
  ATTNKIT_CUDA_CHECK(cudaEventRecord(uploaded_[current_], stream));
  pending_[current_] = true;
}

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

}  // namespace attnkit::planned
