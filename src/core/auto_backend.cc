// `auto` as a backend: at every plan it selects, for this batch, the backend the tuning table
// measured fastest (or the written rules pick), creates it once, and hands every call to it.
#include <map>

#include "attnkit/registry.h"

namespace attnkit {

namespace {

class AutoBackend final : public AttentionBackend {
 public:
  using AttentionBackend::AttentionBackend;

  std::string name() const override { return active_ ? "auto:" + active_->name() : "auto"; }

  // Permissive on purpose: the chosen backend checks the call against its own capabilities.
  Capabilities capabilities() const override {
    Capabilities c;
    c.device = cache().config().device;
    c.q_dtypes = {DType::f32, DType::f16, DType::bf16};
    c.kv_dtypes = {DType::f32, DType::f16, DType::bf16, DType::e4m3};
    c.mla = true;
    c.cuda_graph = false;
    return c;
  }

  void synchronize() override {
    if (active_) active_->synchronize();
  }
  size_t workspace_bytes() const override {
    size_t total = 0;
    for (const auto& [name, b] : backends_) total += b->workspace_bytes();
    return total;
  }
  const Selection& last_selection() const { return selection_; }

 protected:
  void plan(const ForwardBatch& batch) override {
    selection_ = select_backend(model(), cache().config(), &batch);
    auto& slot = backends_[selection_.backend];
    if (!slot) slot = create_backend(selection_.backend, {&model(), &cache()});
    active_ = slot.get();
    active_->init_forward_metadata(batch);
  }
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override {
    active_->forward_extend(layer, q, k, v, out);
  }
  void run_decode(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override {
    active_->forward_decode(layer, q, k, v, out);
  }

 private:
  std::map<std::string, std::unique_ptr<AttentionBackend>> backends_;  // created on first choice
  AttentionBackend* active_ = nullptr;
  Selection selection_;
};

}  // namespace

std::unique_ptr<AttentionBackend> create_auto_backend(const BackendContext& context) {
  return std::make_unique<AutoBackend>(context);
}

}  // namespace attnkit
