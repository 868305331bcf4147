// The `hopper` backend: `planned`'s plan (made once per batch, reused by every layer) and decode
// kernel, with its own extend kernel: warp-specialised TMA + wgmma (kernels/kernel.cuh). The
// extend work items are this kernel's tiles of 128 GQA-packed rows; the K/V pools' tensor maps
// are made once per layer at construction (the pools do not move), the Q map once per call.
#pragma once

#include <vector>

#include "backends/hopper/config.h"
#include "backends/hopper/kernels/extend.h"
#include "backends/planned/backend.h"

namespace attnkit {

class HopperBackend final : public PlannedBackend {
 public:
  explicit HopperBackend(const BackendContext& context);
  std::string name() const override { return "hopper"; }
  Capabilities capabilities() const override { return hopper::capabilities(); }
  DType products_dtype(DType q_dtype) const override { return fp8_products_ ? DType::e4m3 : q_dtype; }

 protected:
  void check_extend(const planned::PrefillParams& p) const override;
  void launch_extend(int layer, const planned::PrefillParams& p, cudaStream_t stream) override;

 private:
  hopper::ExtendParams extend_params(const planned::PrefillParams& p) const;

  struct PoolMaps {
    cuda::TensorMap k, v;
  };
  std::vector<PoolMaps> pool_maps_;  // [num_layers]; empty for an e4m3 cache read without maps, or one refused
  // BackendOptions::hopper_fp8_products, where this cache allows it (hopper::why_no_fp8_products);
  // other caches load as without the option.
  bool fp8_products_ = false;
};

}  // namespace attnkit
