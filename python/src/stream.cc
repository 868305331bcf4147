// StreamJoin: events between the caller's CUDA stream and attnkit's (the per-thread default stream).
#include "stream.h"

#include "attnkit/error.h"

#ifdef ATTNKIT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace attnkit::python {

namespace nb = nanobind;

namespace {

#ifdef ATTNKIT_WITH_CUDA
void check(cudaError_t status, const char* what) {
  ATTNKIT_CHECK(status == cudaSuccess, "stream: ", what, " failed: ", cudaGetErrorString(status));
}

// Streams that the per-thread default stream is ordered with already: the legacy default stream
// (0 and cudaStreamLegacy) and itself.
bool implicitly_ordered(uintptr_t stream) {
  return stream == 0 || stream == reinterpret_cast<uintptr_t>(cudaStreamLegacy) ||
         stream == reinterpret_cast<uintptr_t>(cudaStreamPerThread);
}

cudaEvent_t event(void*& slot) {
  if (slot == nullptr) {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    slot = e;
  }
  return static_cast<cudaEvent_t>(slot);
}
#endif

}  // namespace

StreamJoin::~StreamJoin() {
#ifdef ATTNKIT_WITH_CUDA
  if (entered_) cudaEventDestroy(static_cast<cudaEvent_t>(entered_));
  if (left_) cudaEventDestroy(static_cast<cudaEvent_t>(left_));
#endif
}

uintptr_t StreamJoin::resolve(nb::handle stream, int device_id) {
  if (!stream.is_none()) return nb::cast<uintptr_t>(stream);
  // torch's raw-stream query (what Triton calls): one C call, no Stream object.
  static nb::handle current_raw_stream;  // torch._C._cuda_getCurrentRawStream(device) -> int
  static nb::handle current_stream;      // else torch.cuda.current_stream(device).cuda_stream
  static bool looked = false;
  if (!looked) {
    nb::dict modules = nb::borrow<nb::dict>(nb::module_::import_("sys").attr("modules"));
    if (!modules.contains("torch")) return 0;  // not yet imported: look again next time
    looked = true;
    nb::object c = nb::module_::import_("torch").attr("_C");
    if (nb::hasattr(c, "_cuda_getCurrentRawStream")) {
      current_raw_stream = nb::object(c.attr("_cuda_getCurrentRawStream")).release();
    } else {
      current_stream = nb::object(nb::module_::import_("torch.cuda").attr("current_stream")).release();
    }
  }
  if (current_raw_stream.is_valid()) return nb::cast<uintptr_t>(current_raw_stream(device_id));
  return nb::cast<uintptr_t>(current_stream(device_id).attr("cuda_stream"));
}

void StreamJoin::create_events() {
#ifdef ATTNKIT_WITH_CUDA
  event(entered_);
  event(left_);
#endif
}

void StreamJoin::enter(uintptr_t caller) {
#ifdef ATTNKIT_WITH_CUDA
  if (implicitly_ordered(caller)) return;
  check(cudaEventRecord(event(entered_), reinterpret_cast<cudaStream_t>(caller)), "cudaEventRecord");
  check(cudaStreamWaitEvent(cudaStreamPerThread, event(entered_), 0), "cudaStreamWaitEvent");
#else
  (void)caller;
#endif
}

void StreamJoin::leave(uintptr_t caller) {
#ifdef ATTNKIT_WITH_CUDA
  if (implicitly_ordered(caller)) return;
  check(cudaEventRecord(event(left_), cudaStreamPerThread), "cudaEventRecord");
  check(cudaStreamWaitEvent(reinterpret_cast<cudaStream_t>(caller), event(left_), 0), "cudaStreamWaitEvent");
#else
  (void)caller;
#endif
}

}  // namespace attnkit::python
