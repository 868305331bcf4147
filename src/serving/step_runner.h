// One replay step on the device: every layer of the model, attention through the backend under test
// and (on the GPU) the layer's matrix products around it, timed; q/k/v come from pre-filled random
// buffers. Scheduling is scheduler.h; the verification of a step is verify.h.
#pragma once

#include <memory>
#include <vector>

#include "attnkit/backend.h"
#include "attnkit/tensor.h"
#include "serving/metrics.h"

namespace attnkit::serving {

class LayerGemms;
class GpuEvents;

// What a step runs as each layer's attention: one backend, or the ranks of a context-parallel
// group (cp_attention.h).
class LayerAttention {
 public:
  virtual ~LayerAttention() = default;
  virtual void plan(const ForwardBatch& batch) = 0;  // once a step, before layer 0
  virtual void forward(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out) = 0;
  virtual void synchronize() = 0;
  virtual size_t workspace_bytes() const = 0;
};

class BackendAttention final : public LayerAttention {
 public:
  explicit BackendAttention(AttentionBackend& backend) : backend_(backend) {}
  void plan(const ForwardBatch& batch) override { backend_.init_forward_metadata(batch); }
  void forward(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out) override {
    backend_.forward(layer, q, k, v, out);
  }
  void synchronize() override { backend_.synchronize(); }
  size_t workspace_bytes() const override { return backend_.workspace_bytes(); }

 private:
  AttentionBackend& backend_;
};

// Rows of [heads, dim] values the steps read or write: host memory, and a copy on the device where
// that is not the host.
class StepRows {
 public:
  StepRows(Device device, DType dtype, int64_t num_rows, int heads, int dim);
  // num_tokens rows from row `first`, on the host or on the device.
  TensorView rows(bool host, int64_t first, int num_tokens) const;
  void* host_data() const { return host_.data(); }
  int64_t numel() const { return numel_; }
  void upload();    // host -> device (no-op on cpu)
  void download();  // device -> host (no-op on cpu)

 private:
  DType dtype_;
  int heads_ = 0, dim_ = 0;
  int64_t numel_ = 0;
  Buffer host_, dev_;  // dev_ stays empty on cpu
};

class StepRunner {
 public:
  // max_tokens: the most new tokens a step holds (the scheduler's token budget).
  StepRunner(const ModelSpec& model, LayerAttention& attention, Device device, DType dtype, int max_tokens,
             bool gemms, uint64_t seed);
  ~StepRunner();

  // Runs every layer for the planned batch and waits for the device; fills attn_ms and gemm_ms.
  // check_layer >= 0 writes that layer's attention output to check_out() as well (for verify).
  void run(const ForwardBatch& batch, int64_t step, int check_layer, StepRecord& record);

  // Host copies of the inputs a layer of a step read (the same values as on the device).
  TensorView q_host(int64_t step, int layer, int num_tokens) const;
  TensorView k_host(int64_t step, int layer, int num_tokens) const;
  TensorView v_host(int64_t step, int layer, int num_tokens) const;  // empty for MLA
  // The checked layer's output, downloaded to the host: [num_tokens, num_qo_heads, head_dim_vo].
  TensorView check_out(int num_tokens);

  bool gemms() const { return gemms_ != nullptr; }
  size_t weight_bytes() const;

 private:
  int64_t row_offset(int64_t step, int layer) const;

  const ModelSpec& model_;
  LayerAttention& attention_;
  Device device_;
  int max_tokens_ = 0;
  bool mla_ = false;
  int num_qo_heads_ = 0, num_kv_heads_ = 0, head_dim_qk_ = 0, head_dim_vo_ = 0;
  // Inputs hold 2 * max_tokens rows; each (step, layer) reads a window at its own offset, so the
  // keys stored in the cache differ from step to step.
  std::unique_ptr<StepRows> q_, k_, v_;
  std::unique_ptr<StepRows> out_, check_;  // [max_tokens, num_qo_heads, head_dim_vo]
  std::unique_ptr<LayerGemms> gemms_;
  std::unique_ptr<GpuEvents> events_;
};

}  // namespace attnkit::serving
