// TensorView helpers, Buffer and copies: host memory here, device memory through core's device
// memory interface (core/device_memory.h).
#include "attnkit/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <utility>

#include "attnkit/error.h"
#include "core/device_memory.h"

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
constexpr size_t kHostAlignment = 64;  // one cache line, and a full AVX-512 vector
// Host buffers of 2 MiB or more (KV pools above all) are 2 MiB-aligned and asked to be backed by
// transparent huge pages where the kernel leaves that to the program (THP "madvise" mode): the cpu
// backend's decode reads a KV head's rows 2 KiB apart, and on 4 KiB pages read 13-17% slower
// (2-core Zen 4, 8 x 32768 bf16). Where THP is off the advice is ignored.
constexpr size_t kHugePage = size_t{2} << 20;

// nbytes from src on one device to dst on another (or the same); blocks until done.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_device == Device::cpu && src_device == Device::cpu) {
    std::memcpy(dst, src, nbytes);
  } else if (dst_device == Device::cpu) {
    cuda::copy_device_to_host(dst, src, nbytes);
  } else if (src_device == Device::cpu) {
    cuda::copy_host_to_device(dst, src, nbytes);
  } else {
    cuda::copy_device_to_device(dst, src, nbytes);
  }
}
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
    data_ = cuda::device_malloc(nbytes);
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
    cuda::device_free(data_);
  }
  data_ = nullptr;
}

void Buffer::copy_from_host(const void* src, size_t nbytes, size_t offset) {
  ATTNKIT_CHECK(offset + nbytes <= nbytes_, "Buffer::copy_from_host: ", offset + nbytes,
                " bytes past a buffer of ", nbytes_);
  copy_bytes(static_cast<char*>(data_) + offset, device_, src, Device::cpu, nbytes);
}

void Buffer::copy_to_host(void* dst, size_t nbytes, size_t offset) const {
  ATTNKIT_CHECK(offset + nbytes <= nbytes_, "Buffer::copy_to_host: ", offset + nbytes,
                " bytes past a buffer of ", nbytes_);
  copy_bytes(dst, Device::cpu, static_cast<const char*>(data_) + offset, device_, nbytes);
}

void Buffer::fill_bytes(uint8_t value) {
  if (device_ == Device::cpu) {
    if (nbytes_) std::memset(data_, value, nbytes_);
  } else {
    cuda::device_memset(data_, value, nbytes_);
  }
}

TensorView Buffer::view(DType dtype, std::initializer_list<int64_t> dims) const {
  TensorView t(data_, dtype, device_, dims);
  ATTNKIT_CHECK(t.nbytes() <= nbytes_, "Buffer::view: ", t.describe(), " needs ", t.nbytes(),
                " bytes, the buffer has ", nbytes_);
  return t;
}

void copy(const TensorView& dst, const TensorView& src) {
  ATTNKIT_CHECK(dst.dtype == src.dtype, "copy: dst dtype ", dtype_name(dst.dtype), ", expected the src dtype ",
                dtype_name(src.dtype));
  ATTNKIT_CHECK(dst.numel() == src.numel(), "copy: dst ", dst.describe(), " holds ", dst.numel(),
                " elements, expected the ", src.numel(), " of src ", src.describe());
  ATTNKIT_CHECK(src.numel() == 0 || (!dst.empty() && !src.empty()), "copy: dst ", dst.describe(), ", src ",
                src.describe(), ": expected both present");
  copy_bytes(dst.data, dst.device, src.data, src.device, src.nbytes());
}

bool cuda_available(std::string* why_not) {
  std::string why = cuda::why_unavailable();
  if (why_not) *why_not = why;
  return why.empty();
}

std::string cuda_device_name() { return cuda_available() ? cuda::current_device_name() : std::string(); }

void synchronize(Device device) {
  if (device == Device::cuda) cuda::device_synchronize();
}

}  // namespace attnkit
