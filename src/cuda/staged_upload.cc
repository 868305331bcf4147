#include "cuda/staged_upload.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cuda/check.h"

namespace attnkit::cuda {

namespace {

// A driver function through the runtime's driver entry point (no link to the driver library), or
// null where the driver does not offer it.
template <typename Fn>
Fn driver_entry(const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();  // a failed lookup leaves no error behind: the runtime's way is used instead
    return nullptr;
  }
  return reinterpret_cast<Fn>(f);
}

// The mark: cuStreamWriteValue32 (else an event).
using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
WriteValue32 write_value32() {
  static const WriteValue32 fn = driver_entry<WriteValue32>("cuStreamWriteValue32");
  return fn;
}

// The copy: cuMemcpyHtoDAsync costs less to enqueue than cudaMemcpyAsync, which checks more and
// then calls it (H200 host, a plan of 256 requests: 14.05 -> 13.7 us, median of good passes); else,
// or where it fails, cudaMemcpyAsync, which reports the error.
using MemcpyHtoDAsync = CUresult (*)(CUdeviceptr, const void*, size_t, CUstream);
MemcpyHtoDAsync memcpy_htod_async() {
  static const MemcpyHtoDAsync fn = driver_entry<MemcpyHtoDAsync>("cuMemcpyHtoDAsync");
  return fn;
}

// Whether upload `n` has finished, by the mapped word the stream writes (modulo 2^32).
bool finished(const uint32_t* done, uint32_t n) {
  return static_cast<int32_t>(__atomic_load_n(done, __ATOMIC_ACQUIRE) - n) >= 0;
}

}  // namespace

void check_not_capturing(cudaStream_t stream, const char* what) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  ATTNKIT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  ATTNKIT_CHECK(capturing == cudaStreamCaptureStatusNone, what,
                ": the stream is capturing a CUDA graph; plan the batch before the capture begins");
}

void StagedUpload::release() noexcept {
  // Destructors must not throw: errors here are ignored (the context may already be gone).
  // An upload marked by the stream's write alone has no event: the device is waited for.
  if (done_ != nullptr && (pending_[0] || pending_[1])) cudaDeviceSynchronize();
  for (int i = 0; i < 2; ++i) {
    if (uploaded_[i]) {
      cudaEventSynchronize(uploaded_[i]);
      cudaEventDestroy(uploaded_[i]);
    }
    if (staging_[i]) cudaFreeHost(staging_[i]);
    uploaded_[i] = nullptr;
    staging_[i] = nullptr;
    pending_[i] = false;
    read_by_[i] = 0;
  }
  if (done_) cudaFreeHost(done_);
  done_ = done_device_ = nullptr;
  uploads_ = 0;
  capacity_ = 0;
}

void StagedUpload::allocate(size_t bytes) {
  release();
  bytes = std::max<size_t>(bytes, 16);
  for (int i = 0; i < 2; ++i) {
    ATTNKIT_CUDA_CHECK(cudaMallocHost(&staging_[i], bytes));
    ATTNKIT_CUDA_CHECK(cudaEventCreateWithFlags(&uploaded_[i], cudaEventDisableTiming));
  }
  capacity_ = bytes;
  if (write_value32() != nullptr) {
    void* word = nullptr;
    ATTNKIT_CUDA_CHECK(cudaHostAlloc(&word, 64, cudaHostAllocMapped));
    done_ = static_cast<uint32_t*>(word);
    *done_ = 0;
    void* device_word = nullptr;
    ATTNKIT_CUDA_CHECK(cudaHostGetDevicePointer(&device_word, word, 0));
    done_device_ = static_cast<uint32_t*>(device_word);
  }
}

void StagedUpload::reserve(size_t bytes) {
  if (bytes > capacity_) allocate(std::max(bytes, capacity_ + capacity_ / 2));
}

void StagedUpload::wait_for_mark(uint32_t number) const {
  for (int spin = 0; spin < 64; ++spin) {
    if (finished(done_, number)) return;
  }
  const auto since = std::chrono::steady_clock::now();
  while (!finished(done_, number)) {
    std::this_thread::yield();  // the GPU is behind: do not hold the core
    if (std::chrono::steady_clock::now() - since > std::chrono::milliseconds(100)) {
      // Long behind, or the upload was captured into a graph and never ran: the stream is waited for
      // (which reports a capture as an error), and then the mark must be there.
      ATTNKIT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      ATTNKIT_CHECK(finished(done_, number), "plan upload ", number, " never completed on its stream");
      return;
    }
  }
}

std::byte* StagedUpload::begin_write() {
  current_ ^= 1;
  if (pending_[current_]) {
    if (read_by_[current_] != 0) {
      wait_for_mark(read_by_[current_]);
    } else {
      ATTNKIT_CUDA_CHECK(cudaEventSynchronize(uploaded_[current_]));
    }
    pending_[current_] = false;
  }
  return static_cast<std::byte*>(staging_[current_]);
}

void StagedUpload::upload(void* device, size_t begin, size_t end, cudaStream_t stream) {
  ATTNKIT_CHECK(begin <= end && end <= capacity_, "plan upload of bytes [", begin, ", ", end,
                ") exceeds the staging buffer (", capacity_, ")");
  if (begin == end) return;
  std::byte* dst = static_cast<std::byte*>(device) + begin;
  const std::byte* src = static_cast<const std::byte*>(staging_[current_]) + begin;
  const MemcpyHtoDAsync copy = memcpy_htod_async();
  if (copy == nullptr || copy(reinterpret_cast<CUdeviceptr>(dst), src, end - begin, reinterpret_cast<CUstream>(stream)) !=
                             CUDA_SUCCESS) {
    ATTNKIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, end - begin, cudaMemcpyHostToDevice, stream));
  }
  read_by_[current_] = 0;
  const uint32_t number = uploads_ + 1 == 0 ? 1 : uploads_ + 1;  // 0 stands for "marked by an event"
  if (done_ != nullptr &&
      write_value32()(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(done_device_), number, 0) ==
          CUDA_SUCCESS) {
    read_by_[current_] = uploads_ = number;
    stream_ = stream;
  } else {
    ATTNKIT_CUDA_CHECK(cudaEventRecord(uploaded_[current_], stream));
  }
  pending_[current_] = true;
}

}  // namespace attnkit::cuda
