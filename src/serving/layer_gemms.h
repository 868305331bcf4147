// The non-attention work of a transformer layer on the GPU, as cuBLAS bf16 matrix products of the
// preset's real shapes, and CUDA events recorded without waiting (for the attention share of a step).
// Host-only header; compiled only with ATTNKIT_WITH_CUDA. Attention itself is the backend's.
#pragma once

#include <cstddef>
#include <memory>

#include "attnkit/spec.h"

namespace attnkit::serving {

// Widths of one layer's matrix products (row-major activations [num_tokens, width]).
struct GemmShapes {
  int hidden = 0;        // model width
  int qkv = 0;           // q, k and v projections side by side (MLA: queries + one latent row)
  int attn_out = 0;      // num_qo_heads * head_dim_vo, the o projection's input
  int intermediate = 0;  // MLP width: gate and up are [hidden, intermediate] each, down its transpose
};
GemmShapes gemm_shapes(const ModelSpec& model);

class LayerGemms {
 public:
  // Weights of one layer (shared by every layer: the same shapes, so the same time) and activation
  // buffers for up to max_tokens tokens, filled with small random bf16 values.
  LayerGemms(const ModelSpec& model, int max_tokens);
  ~LayerGemms();
  LayerGemms(const LayerGemms&) = delete;
  LayerGemms& operator=(const LayerGemms&) = delete;

  // x [T, hidden] -> qkv [T, qkv]: the projection that produces attention's inputs.
  void before_attention(int num_tokens);
  // attn_out [T, attn_out] bf16 (the backend's output, on the device) -> o projection -> x;
  // x -> gate|up [T, 2 * intermediate] -> silu(gate) * up -> down -> x.
  void after_attention(int num_tokens, const void* attn_out);
  size_t weight_bytes() const;
  size_t activation_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A fixed set of CUDA events on the default stream. record() never waits; elapsed_ms() is read after
// the last recorded event completed (synchronize_last()).
class GpuEvents {
 public:
  explicit GpuEvents(int count);
  ~GpuEvents();
  GpuEvents(const GpuEvents&) = delete;
  GpuEvents& operator=(const GpuEvents&) = delete;
  void record(int idx);
  void synchronize(int idx);
  float elapsed_ms(int from, int to) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace attnkit::serving
