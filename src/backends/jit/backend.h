// The `jit` backend (Triton's role): kernels rendered from readable templates for the exact head
// dims, GQA group, page size, dtype and user variants of a layer, compiled at run time with NVRTC,
// cached in memory and on disk (module_cache.h), the tile autotuned per shape bucket (tuner.h).
// init_forward_metadata uploads the batch once; the first layer of each tile shape cuts and uploads
// its work (work.h); every layer stores its new K/V and launches its kernel (and the split-KV merge),
// decode, extend and mixed batches alike.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attnkit/backend.h"
#include "attnkit/tensor.h"
#include "backends/jit/module_cache.h"
#include "backends/jit/work.h"

namespace attnkit {

class JitBackend final : public AttentionBackend {
 public:
  explicit JitBackend(const BackendContext& context);
  std::string name() const override { return "jit"; }
  Capabilities capabilities() const override;
  void synchronize() override;
  size_t workspace_bytes() const override;


 protected:
  void plan(const ForwardBatch& batch) override;
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override;

 private:
  // One upload a batch: out_cache_loc (i64), then int32 token -> request, requests [B][4]
  // (first new token, prefix, KV length, first page entry) and the page table.
  Buffer arena_;
  size_t off_token_request_ = 0, off_requests_ = 0, off_pages_ = 0;
  std::vector<jit::WorkRequest> work_requests_;  // the batch's, for cutting mma_tile's work
  bool decode_shaped_ = false;                   // every request brings at most 16 packed rows
  std::string bucket_;                           // the batch's shape bucket (tuner.h)
  int generation_ = 0;                           // batches planned: a Work of an older one is stale
  int num_sms_ = 0;
  int max_group_ = 1;  // the widest GQA group of the model's layers: it decides decode_shaped_
  // mma_tile's work, cut and uploaded once a batch for each tile shape and mask the layers use.
  struct Work {
    Buffer items;  // items, then merges (work.h)
    Buffer tile_flags;  // the mask_mod's tile flags (kernels/mma_tile.h: tile_mask), where it has one
    int num_items = 0, num_merges = 0, partial_rows = 0;
    int generation = -1;
  };
  std::map<std::string, Work> works_;
  Buffer partials_;  // split-KV partials: fp32 O, then the LSEs
  std::vector<Buffer> sinks_;  // [num_layers], empty where a layer has none
  // [num_layers x {bf16, f16} q]: each layer's key (its tile aside), made once, and the tuned
  // kernel of the current bucket, so a call pays no rendering or hashing.
  std::vector<std::optional<jit::KernelKey>> keys_;
  struct Tuned {
    const jit::CompiledKernel* kernel;
    jit::KernelKey key;  // with the chosen tile
  };
  std::map<std::string, Tuned> tuned_;  // by bucket and key
  // [num_layers x {bf16, f16} q]: this batch's choice and its work, once looked up.
  std::vector<const Tuned*> layer_tuned_;
  std::vector<const Work*> layer_work_;
  const jit::KernelKey& key(int layer, DType q_dtype);
  // The work of `kernel` (of `key`'s mask) on this batch: cut, uploaded and its tile mask computed
  // the first time a batch asks.
  const Work& work(int layer, const jit::KernelKey& key, const jit::CompiledKernel& kernel);
  // What both templates' attend takes of a layer and the batch, as lvalues for cudaLaunchKernel.
  struct LaunchArgs {
    const void* q;
    void* out;
    const void* k_pool;
    const void* v_pool;
    const void* token_request;
    const void* requests;
    const void* pages;
    const void* sinks;
    float sm_scale, soft_cap;
    int window_left, causal;
  };
  LaunchArgs launch_args(int layer, const TensorView& q, const TensorView& out) const;
  void launch_mma_tile(int layer, const jit::CompiledKernel& kernel, const Work& work, const TensorView& q,
                       const TensorView& out);
  void launch_warp_row(int layer, const jit::CompiledKernel& kernel, const TensorView& q, const TensorView& out);
  // The tile the tuner chose for the layer's key in this batch's bucket (`name`: both), measured on
  // this call (q, out) the first time.
  const Tuned& tuned(const std::string& name, int layer, const jit::KernelKey& base, const TensorView& q,
                     const TensorView& out);
  // The index of (layer, q dtype) in keys_, layer_tuned_ and layer_work_.
  static size_t layer_slot(int layer, DType q_dtype) { return static_cast<size_t>(layer) * 2 + (q_dtype == DType::bf16 ? 0 : 1); }
};

}  // namespace attnkit
