// A replay step's attention over a context-parallel group of ranks in this process: each rank has
// its own cache (one share of every request's pages, ShareLayout) and runs the named backend over
// it; decode requests go through ContextParallelDecode, prompts through ContextParallelPrefill's
// zig-zag split, and the merged output lands in the step's rows as one backend's would. The ranks
// run one after another on this thread (InProcessGroup, on the backend's device), on the CPU or on
// one GPU, the step's rows staged through the host: a step's time is the ranks' sum and the
// copies', a correctness and memory run, not a speed one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attnkit/context_parallel.h"
#include "serving/step_runner.h"

namespace attnkit::serving {

class ContextParallelAttention final : public LayerAttention {
 public:
  // caches: rank r's is caches[r], on the backend's device; all outlive this object. Throws
  // attnkit::Error where the backend cannot serve as a rank (it must return the LSE) or the model
  // is refused.
  ContextParallelAttention(const ModelSpec& model, const std::string& backend, const std::vector<KvCache*>& caches,
                           const ShareLayout& layout);
  ~ContextParallelAttention() override;

  // A batch of the sharded page pool (global page ids), prompts unchunked (prefix_lens 0) and
  // decodes in any order.
  void plan(const ForwardBatch& batch) override;
  void forward(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out) override;
  void synchronize() override;
  size_t workspace_bytes() const override { return 0; }

  // Empty when `backend` can be a rank of a group in this process; else why not.
  static std::string why_not(const std::string& backend);

 private:
  struct Part;  // the decode or the prompt requests of a step
  void run_decode(int layer, Part& part);
  void run_prefill(int layer, Part& part);

  Device device_;  // the ranks' (the backend's)
  InProcessGroup group_;
  std::vector<std::unique_ptr<AttentionBackend>> backends_;       // [rank] decode: over the rank's cache
  std::vector<std::unique_ptr<ContextParallelDecode>> decode_;    // [rank]
  std::vector<std::unique_ptr<ContextParallelPrefill>> prefill_;  // [rank]
  std::unique_ptr<Part> decode_part_, prefill_part_;
  std::vector<uint8_t> q_host_, k_host_, v_host_, out_host_;  // the step's rows, where they are on a GPU
};

}  // namespace attnkit::serving
