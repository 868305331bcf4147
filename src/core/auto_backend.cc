// `auto` as a backend: at every plan it selects, for this batch, the backend the tuning table
// measured fastest (or the written rules pick), creates it once, and hands every call to it.
#include <map>

#include "attnkit/registry.h"
#include "core/delegating_backend.h"

namespace attnkit {

namespace {

class AutoBackend final : public DelegatingBackend {
 public:
  using DelegatingBackend::DelegatingBackend;

  std::string name() const override { return active() ? "auto:" + active()->name() : "auto"; }

  // Permissive on purpose: the chosen backend checks the call against its own capabilities.
  Capabilities capabilities() const override {
    Capabilities c;
    c.device = cache().config().device;
    c.q_dtypes = {DType::f32, DType::f16, DType::bf16};
    c.kv_dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3};
    c.mla = true;
    c.cuda_graph = false;
    c.lse = true;
    return c;
  }

  void synchronize() override {
    if (active()) active()->synchronize();
  }
  size_t workspace_bytes() const override {
    size_t total = 0;
    for (const auto& [name, b] : backends_) total += b->workspace_bytes();
    return total;
  }

 protected:
  AttentionBackend* choose(const ForwardBatch& batch) override {
    const std::string chosen = select_backend(model(), cache().config(), &batch).backend;
    auto& slot = backends_[chosen];
    if (!slot) slot = create_backend(chosen, {&model(), &cache()});
    return slot.get();
  }

 private:
  std::map<std::string, std::unique_ptr<AttentionBackend>> backends_;  // created on first choice
};

}  // namespace

std::unique_ptr<AttentionBackend> create_auto_backend(const BackendContext& context) {
  return std::make_unique<AutoBackend>(context);
}

}  // namespace attnkit
