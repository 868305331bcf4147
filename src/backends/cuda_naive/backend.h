// The `cuda-naive` backend: the IO-unaware baseline. For every request and head, S = Q K^T goes to
// an HBM workspace, softmax runs over it in place, then O = P V: three kernels (kernels/), each
// launched once for the batch, no tiling.
#pragma once

#include <vector>

#include "attnkit/backend.h"
#include "backends/cuda_naive/config.h"

namespace attnkit {

class CudaNaiveBackend final : public AttentionBackend {
 public:
  explicit CudaNaiveBackend(const BackendContext& context);
  std::string name() const override { return "cuda-naive"; }
  Capabilities capabilities() const override { return cuda_naive::capabilities(); }
  void synchronize() override;
  // Device memory held beyond the cache: the score workspace and the uploaded batch metadata.
  size_t workspace_bytes() const override;

  // Bytes of score workspace `batch` needs under this model: num_qo_heads x qo_len x kv_len floats
  // summed over the requests (every score of the batch is in HBM at once).
  size_t score_bytes(const ForwardBatch& batch) const;

 protected:
  void plan(const ForwardBatch& batch) override;
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;

 private:
  // Grows `buffer` to at least `nbytes` and copies `nbytes` from `src` into it.
  static void upload(Buffer& buffer, const void* src, size_t nbytes);

  Buffer scores_;            // [sum over requests of num_qo_heads * qo_len * kv_len] f32
  Buffer requests_;          // [batch_size] cuda_naive::RequestInfo
  Buffer page_indices_;      // [kv_page_indices.size()] i32
  Buffer out_cache_loc_;     // [num_tokens] i64
  Buffer custom_mask_;       // [custom_mask.size()] u8, empty without masks
  std::vector<Buffer> sinks_;  // [num_layers] each [num_qo_heads] f32, empty where the layer has none
  int max_kv_len_ = 0;       // of the planned batch
};

}  // namespace attnkit
