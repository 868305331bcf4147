// A plan's index arrays packed into one host buffer and copied to the device in one upload, so a
// step's kernels read them from fixed addresses. Add the 8-byte arrays before the 4-byte ones so
// every array starts aligned.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "attnkit/tensor.h"

namespace attnkit::parallel {

class IndexUpload {
 public:
  // Appends `values`; returns their byte offset in the upload.
  template <typename T>
  size_t add(const std::vector<T>& values) {
    const size_t at = host_.size();
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    host_.insert(host_.end(), bytes, bytes + values.size() * sizeof(T));
    return at;
  }
  // Copies the packed arrays into `dst`, made anew on `device` where it is too small; returns its
  // first byte (add()'s offsets count from there).
  uint8_t* upload(Buffer& dst, Device device) const {
    if (dst.nbytes() < host_.size()) dst = Buffer(device, host_.size());
    if (!host_.empty()) dst.copy_from_host(host_.data(), host_.size());
    return static_cast<uint8_t*>(dst.data());
  }

 private:
  std::vector<uint8_t> host_;
};

}  // namespace attnkit::parallel
