// Staged host/device arrays and random fills for the harness.
#include "harness/device_copy.h"

#include <random>

#include "attnkit/error.h"

namespace attnkit::harness {

Staged::Staged(Device device, DType dtype, std::vector<int64_t> shape)
    : device_(device), dtype_(dtype), shape_(std::move(shape)) {
  ATTNKIT_CHECK(shape_.size() >= 1 && shape_.size() <= 4, "Staged: rank must be 1..4, got ", shape_.size());
  for (int64_t d : shape_) numel_ *= d;
  host_.resize(static_cast<size_t>(numel_) * dtype_size(dtype_));
  if (device_ == Device::cuda) device_buffer_ = Buffer(Device::cuda, host_.size());
}

TensorView Staged::make_view(void* data, Device device) const {
  TensorView t;
  t.data = data;
  t.dtype = dtype_;
  t.device = device;
  t.rank = static_cast<int>(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) t.shape[i] = shape_[i];
  // An empty array still needs a non-null pointer to count as present.
  if (t.data == nullptr) t.data = const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(this));
  return t;
}

TensorView Staged::host() const { return make_view(const_cast<uint8_t*>(host_.data()), Device::cpu); }

TensorView Staged::dev() const {
  return device_ == Device::cpu ? host() : make_view(device_buffer_.data(), Device::cuda);
}

void Staged::upload() {
  if (device_ == Device::cuda) device_buffer_.copy_from_host(host_.data(), host_.size());
}

void Staged::download() {
  if (device_ == Device::cuda) device_buffer_.copy_to_host(host_.data(), host_.size());
}

void Staged::poison() {
  std::fill(host_.begin(), host_.end(), uint8_t{0xFF});
  if (device_ == Device::cuda) device_buffer_.fill_bytes(0xFF);
}

Staged widen_to_f32(const Staged& src) {
  const TensorView h = src.host();
  Staged out(Device::cpu, DType::f32, {h.dim(0), h.dim(1), h.dim(2)});
  for (int64_t e = 0; e < h.numel(); ++e) static_cast<float*>(out.host_data())[e] = load_as_float(h.data, h.dtype, e);
  return out;
}

void fill_uniform(const TensorView& host, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  const int64_t n = host.numel();
  for (int64_t i = 0; i < n; ++i) store_from_float(host.data, host.dtype, i, dist(rng));
}

}  // namespace attnkit::harness
