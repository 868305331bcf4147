// The `jit` backend (Triton's role): kernels rendered from readable templates for the exact head
// dims, GQA group, page size, dtype and user variants of a layer, compiled at run time with NVRTC,
// cached in memory and on disk (module_cache.h). init_forward_metadata uploads the batch once;
// every layer stores its new K/V and launches its kernel, decode, extend and mixed batches alike.
#pragma once

#include <vector>

#include "attnkit/backend.h"
#include "attnkit/tensor.h"
#include "backends/jit/module_cache.h"

namespace attnkit {

class JitBackend final : public AttentionBackend {
 public:
  explicit JitBackend(const BackendContext& context);
  std::string name() const override { return "jit"; }
  Capabilities capabilities() const override;
  void synchronize() override;
  size_t workspace_bytes() const override { return arena_.nbytes(); }


 protected:
  void plan(const ForwardBatch& batch) override;
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;

 private:
  // One upload a batch: out_cache_loc (i64), then int32 token -> request, requests [B][4]
  // (first new token, prefix, KV length, first page entry) and the page table.
  Buffer arena_;
  size_t off_token_request_ = 0, off_requests_ = 0, off_pages_ = 0;
  std::vector<Buffer> sinks_;  // [num_layers], empty where a layer has none
  // [num_layers x {bf16, f16} q]: each layer's kernel, looked up once, so a call pays no
  // rendering or hashing (ModuleCache keeps the kernels for the process).
  std::vector<const jit::CompiledKernel*> kernels_;
  const jit::CompiledKernel& kernel(int layer, DType q_dtype);
};

}  // namespace attnkit
