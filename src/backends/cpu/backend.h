// The `cpu` backend: tiled attention with online softmax read straight from the paged cache,
// split-KV decode, a persistent thread pool and SIMD chosen at run time (Highway).
#pragma once

#include <memory>
#include <vector>

#include "attnkit/backend.h"
#include "backends/cpu/config.h"
#include "backends/cpu/plan.h"
#include "backends/cpu/thread_pool.h"

namespace attnkit {

namespace cpu {
struct AttendParams;
struct AlignedFloats;  // per-thread scratch, 64-byte aligned
}  // namespace cpu

class CpuBackend final : public AttentionBackend {
 public:
  // `pool`: the threads to run on; null uses the process-wide pool sized to the cores.
  explicit CpuBackend(const BackendContext& context, cpu::ThreadPool* pool = nullptr);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  Capabilities capabilities() const override { return cpu::capabilities(); }
  // Scratch of every thread plus the split-KV partials of the current plan.
  size_t workspace_bytes() const override;
  // The plan the layer uses for the current batch (for tests and `attnkit bench`'s notes).
  const cpu::Plan& layer_plan(int layer) const;

 protected:
  void plan(const ForwardBatch& batch) override;
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;

 private:
  cpu::AttendParams params(int layer, const cpu::Plan& plan, const TensorView& q, const TensorView& out) const;

  cpu::ThreadPool& pool_;
  int simd_lanes_ = 0;
  std::vector<cpu::PlanShape> shapes_;  // the distinct layer shapes of the model
  std::vector<int> layer_shape_;        // [num_layers] index into shapes_
  std::vector<cpu::Plan> plans_;        // [shapes_.size()] for the current batch
  std::vector<std::unique_ptr<cpu::AlignedFloats>> scratch_;  // [pool threads]
  std::vector<float> partial_o_;        // [partial_rows, head_dim_vo] split-KV outputs
  std::vector<float> partial_lse_;      // [partial_rows]
};

}  // namespace attnkit
