// TensorView helpers and Buffer: host memory here, device memory through src/cuda.
#include "attnkit/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "attnkit/error.h"
#ifdef ATTNKIT_WITH_CUDA
#include "cuda/memory.h"
#endif

namespace attnkit {

TensorView::TensorView(void* data_in, DType dtype_in, Device device_in,
                       std::initializer_list<int64_t> dims)
    : data(data_in), dtype(dtype_in), device(device_in), rank(static_cast<int>(dims.size())) {
  ATTNKIT_CHECK(dims.size() <= shape.size(), "TensorView: rank must be at most 4, got ", dims.size());
  size_t i = 0;
  for (int64_t d : dims) shape[i++] = d;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= shape[static_cast<size_t>(i)];
  return rank == 0 ? 0 : n;
}

std::string TensorView::describe() const {
  if (empty()) return "(none)";
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << shape[static_cast<size_t>(i)];
  os << "] " << dtype_name(dtype) << ' ' << device_name(device);
  return os.str();
}

namespace {
[[maybe_unused, noreturn]] void no_cuda() {
  throw Error("device cuda: this attnkit was built without CUDA (ATTNKIT_WITH_CUDA=OFF)");
}
constexpr size_t kHostAlignment = 64;  // one cache line, and a full AVX-512 vector
// Host buffers of 2 MiB or more (KV pools above all) are 2 MiB-aligned and asked to be backed by
// transparent huge pages where the kernel leaves that to the program (THP "madvise" mode): the cpu
// backend's decode reads a KV head's rows 2 KiB apart, and on 4 KiB pages read 13-17% slower
// (2-core Zen 4, 8 x 32768 bf16). Where THP is off the advice is ignored.
constexpr size_t kHugePage = size_t{2} << 20;
}  // namespace

Buffer::Buffer(Device device, size_t nbytes) : nbytes_(nbytes), device_(device) {
  if (nbytes == 0) return;
  if (device == Device::cpu) {
    const size_t align = nbytes >= kHugePage ? kHugePage : kHostAlignment;
    const size_t rounded = (nbytes + align - 1) / align * align;
    data_ = std::aligned_alloc(align, rounded);
    ATTNKIT_CHECK(data_ != nullptr, "Buffer: host allocation of ", nbytes, " bytes failed");
    if (align == kHugePage) madvise(data_, rounded, MADV_HUGEPAGE);
  } else {
#ifdef ATTNKIT_WITH_CUDA
    data_ = cuda::device_malloc(nbytes);
#else
    no_cuda();
#endif
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      nbytes_(std::exchange(other.nbytes_, 0)),
      device_(other.device_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    nbytes_ = std::exchange(other.nbytes_, 0);
    device_ = other.device_;
  }
  return *this;
}

void Buffer::release() noexcept {
  if (!data_) return;
  if (device_ == Device::cpu) {
    std::free(data_);
  } else {
#ifdef ATTNKIT_WITH_CUDA
    cuda::device_free(data_);
#endif
  }
  data_ = nullptr;
}

void Buffer::copy_from_host(const void* src, size_t nbytes, size_t offset) {
  ATTNKIT_CHECK(offset + nbytes <= nbytes_, "Buffer::copy_from_host: ", offset + nbytes,
                " bytes past a buffer of ", nbytes_);
  char* dst = static_cast<char*>(data_) + offset;
  if (device_ == Device::cpu) {
    if (nbytes) std::memcpy(dst, src, nbytes);
  } else {
#ifdef ATTNKIT_WITH_CUDA
    cuda::copy_host_to_device(dst, src, nbytes);
#endif
  }
}

void Buffer::copy_to_host(void* dst, size_t nbytes, size_t offset) const {
  ATTNKIT_CHECK(offset + nbytes <= nbytes_, "Buffer::copy_to_host: ", offset + nbytes,
                " bytes past a buffer of ", nbytes_);
  const char* src = static_cast<const char*>(data_) + offset;
  if (device_ == Device::cpu) {
    if (nbytes) std::memcpy(dst, src, nbytes);
  } else {
#ifdef ATTNKIT_WITH_CUDA
    cuda::copy_device_to_host(dst, src, nbytes);
#endif
  }
}

void Buffer::fill_bytes(uint8_t value) {
  if (device_ == Device::cpu) {
    if (nbytes_) std::memset(data_, value, nbytes_);
  } else {
#ifdef ATTNKIT_WITH_CUDA
    cuda::device_memset(data_, value, nbytes_);
#endif
  }
}

TensorView Buffer::view(DType dtype, std::initializer_list<int64_t> dims) const {
  TensorView t(data_, dtype, device_, dims);
  ATTNKIT_CHECK(t.nbytes() <= nbytes_, "Buffer::view: ", t.describe(), " needs ", t.nbytes(),
                " bytes, the buffer has ", nbytes_);
  return t;
}

bool cuda_available(std::string* why_not) {
#ifdef ATTNKIT_WITH_CUDA
  std::string why = cuda::why_unavailable();
#else
  std::string why = "built without CUDA";
#endif
  if (why_not) *why_not = why;
  return why.empty();
}

void synchronize(Device device) {
  if (device == Device::cuda) {
#ifdef ATTNKIT_WITH_CUDA
    cuda::device_synchronize();
#else
    no_cuda();
#endif
  }
}

}  // namespace attnkit
