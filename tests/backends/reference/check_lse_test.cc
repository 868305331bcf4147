// The conformance check compares the LSE of a backend that writes it: one that writes every
// output right and one LSE row off by 0.1 must fail, naming that row.
#include <gtest/gtest.h>

#include "attnkit/registry.h"
#include "harness/check.h"

namespace attnkit {
namespace {

class LseOffBackend final : public AttentionBackend {
 public:
  explicit LseOffBackend(const BackendContext& ctx) : AttentionBackend(ctx), inner_(create_backend("reference", ctx)) {}
  std::string name() const override { return "lse-off"; }
  Capabilities capabilities() const override { return Registry::global().get("reference").capabilities(); }

 protected:
  void plan(const ForwardBatch& batch) override { inner_->init_forward_metadata(batch); }
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override {
    inner_->forward_extend(layer, q, k, v, out, lse_output());
    if (!lse_output().empty()) lse_output().as<float>()[lse_output().numel() - 1] += 0.1f;
  }

 private:
  std::unique_ptr<AttentionBackend> inner_;
};

TEST(CheckLse, AnLseOffByATenthFailsNamingItsRow) {
  Registry::global().add({.name = "lse-off",
                          .description = "reference with one LSE row off (test only)",
                          .device = Device::cpu,
                          .capabilities = [] { return Registry::global().get("reference").capabilities(); },
                          .why_unavailable = {},
                          .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                            return std::make_unique<LseOffBackend>(ctx);
                          }});
  harness::CheckCase c;
  c.spec.num_qo_heads = 4;
  c.spec.num_kv_heads = 2;
  c.spec.head_dim_qk = c.spec.head_dim_vo = 16;
  c.q_dtype = c.kv_dtype = DType::f32;
  c.requests = {{5, 3}, {0, 4}};
  const harness::CheckResult r = harness::run_check("lse-off", c);
  ASSERT_TRUE(r.skipped.empty()) << r.skipped;
  EXPECT_TRUE(r.lse_checked);
  EXPECT_LE(r.rel_err, r.tolerance);  // the outputs are right
  EXPECT_FALSE(r.passed);
  EXPECT_NEAR(r.lse_max_abs_err, 0.1, 1e-5);
  EXPECT_NE(r.message.find("worst LSE: layer 0 token 6 head 3"), std::string::npos) << r.message;
  // The reference against itself: the LSE agrees.
  const harness::CheckResult same = harness::run_check("reference", c);
  EXPECT_TRUE(same.passed) << same.message;
  EXPECT_EQ(same.lse_max_abs_err, 0.0);
}

}  // namespace
}  // namespace attnkit
