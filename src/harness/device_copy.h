// Moving host data to and from a backend's device, for the harness (tests, check, bench).
#pragma once

#include <cstdint>
#include <vector>

#include "attnkit/tensor.h"

namespace attnkit::harness {

// A host array of `dtype` values, and its copy on `device` (the same memory when device is cpu).
class Staged {
 public:
  Staged(Device device, DType dtype, std::vector<int64_t> shape);
  TensorView host() const;
  TensorView dev() const;
  void upload();    // host -> device (no-op on cpu)
  void download();  // device -> host (no-op on cpu)
  void poison();    // 0xFF bytes everywhere: NaN in every float dtype
  void* host_data() { return host_.data(); }
  int64_t numel() const { return numel_; }

 private:
  TensorView make_view(void* data, Device device) const;
  Device device_;
  DType dtype_;
  std::vector<int64_t> shape_;
  int64_t numel_ = 1;
  std::vector<uint8_t> host_;
  Buffer device_buffer_;
};

// An exact f32 host copy of the host values of a three-dimensional `src` (what the reference reads).
Staged widen_to_f32(const Staged& src);

// Fills `host` (any value dtype) with values drawn uniformly from [lo, hi), rounded to its dtype.
void fill_uniform(const TensorView& host, uint64_t seed, float lo, float hi);

}  // namespace attnkit::harness
