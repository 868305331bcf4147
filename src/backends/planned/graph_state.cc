// PlanArena: the device buffer a plan fills, its layout and its staging buffers (cuda/staged_upload.h).
#include "backends/planned/graph_state.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "cuda/check.h"

namespace attnkit::planned {

PlanArena::~PlanArena() { release(); }

void PlanArena::release() noexcept {
  // Destructors must not throw: errors here are ignored (the context may already be gone).
  staging_.release();  // first: it waits for the copies into device_
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
  staging_.allocate(bytes);
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

}  // namespace attnkit::planned
