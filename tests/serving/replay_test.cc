// The replay loop end to end on the CPU with tiny heads: 10,000 requests through `reference` (and
// `cpu` when built) with sampled verification, a hybrid pair, the JSON, and a wrong backend that
// --verify must catch.
#include <gtest/gtest.h>

#include "attnkit/registry.h"
#include "serving/replay.h"
#include "serving/replay_json.h"
#include "serving/tiny_model.h"

namespace attnkit::serving {
namespace {

using testing::has_backend;
using testing::tiny_model;
using testing::tiny_trace;

ReplayOptions tiny_options(const std::string& backend) {
  ReplayOptions o;
  o.backend = backend;
  o.model = tiny_model(2);
  o.page_size = 8;
  o.dtype = DType::f32;
  o.kv_dtype = DType::f32;
  o.kv_pages = 96;  // small: the replay must preempt and still finish everything
  o.scheduler = {.max_batch_size = 64, .token_budget = 128, .watermark_pages = 1};
  o.verify = true;
  o.verify_every = 211;
  o.verify_max = 12;
  return o;
}

TEST(Replay, TenThousandRequestsLoseNoneAndLeakNoPage) {
  const Trace t = tiny_trace(10000, 11);
  int ran = 0;
  for (const std::string backend : {"reference", "cpu"}) {
    if (!has_backend(backend)) continue;
    ++ran;
    const ReplayResult r = run_replay(t, tiny_options(backend));  // throws on a lost request or a leaked page
    ASSERT_TRUE(r.skipped.empty()) << r.skipped;
    EXPECT_EQ(r.summary.num_requests, 10000) << backend;
    EXPECT_GT(r.num_preemptions, 0) << backend;
    EXPECT_LE(r.peak_pages, 96);
    EXPECT_GE(r.verified.size(), backend == "reference" ? 0u : 2u);  // reference is not checked against itself
    for (const VerifyRecord& v : r.verified) EXPECT_TRUE(v.passed) << v.message;
    int64_t outputs = 0;
    for (const TraceRequest& q : t.requests) outputs += q.output_len;
    EXPECT_EQ(r.summary.output_tokens, outputs);
    EXPECT_GT(r.summary.output_tokens_per_s, 0.0);
    EXPECT_GE(r.summary.ttft_s.p50, 0.0);
    EXPECT_LE(r.summary.ttft_s.p50, r.summary.ttft_s.p99);
    // Each request waits for admission, then its prefill runs: both parts are of its TTFT.
    for (const RequestRecord& q : r.requests) {
      ASSERT_GE(q.queue_s, 0.0) << backend;
      ASSERT_GE(q.ttft_s, q.queue_s) << backend;
    }
    EXPECT_GT(r.summary.queue_s.max, 0.0) << backend << ": 10,000 requests on 96 pages wait";
    EXPECT_GT(r.summary.sched_fraction, 0.0);
    EXPECT_LT(r.summary.sched_fraction, 1.0);
  }
  EXPECT_GT(ran, 0) << "neither reference nor cpu is registered";
}

TEST(Replay, HybridPairAndJson) {
  const Trace t = tiny_trace(300, 5);
  ReplayOptions o = tiny_options("");
  o.prefill_backend = "reference";
  o.decode_backend = has_backend("cpu") ? "cpu" : "reference";
  const ReplayResult r = run_replay(t, o);
  EXPECT_EQ(r.label, "reference+" + o.decode_backend);
  EXPECT_EQ(r.summary.num_requests, 300);
  const nlohmann::json j = run_json(r);
  EXPECT_EQ(j["summary"]["requests"], 300);
  EXPECT_EQ(j["requests"].size(), 300u);
  EXPECT_EQ(j["steps"][0].size(), j["steps_columns"].size());
  EXPECT_TRUE(j["summary"].contains("ttft_s"));
  EXPECT_TRUE(j["summary"]["queue_s"].contains("p90"));
  EXPECT_TRUE(j["summary"]["admitted_ttft_s"].contains("p90"));
  EXPECT_EQ(j["requests"][0].size(), j["requests_columns"].size());
  EXPECT_TRUE(j["summary"]["tpot_s"].contains("p99"));
}

TEST(Replay, UnknownOrUnsupportedBackendIsASkipOrAnError) {
  const Trace t = tiny_trace(4, 1);
  EXPECT_THROW(run_replay(t, tiny_options("no-such-backend")), Error);
}

// Too small a KV cache names the number the user gave (pages, or memory in GiB and MiB).
TEST(Replay, TooSmallACacheNamesWhatWasGiven) {
  const Trace t = tiny_trace(4, 1);
  auto message = [&](ReplayOptions o) {
    try {
      run_replay(t, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ReplayOptions o = tiny_options("reference");
  o.kv_pages = 1;
  EXPECT_EQ(message(o), "replay: kv_pages must be >= 2 (or 0: from the KV memory), got 1");
  o.kv_pages = 0;
  o.kv_memory_bytes = 1024;
  EXPECT_EQ(message(o), "replay: kv_memory_bytes of 1 KiB holds 1 page of 1 KiB; expected room for at least 2 pages: "
                        "more KV memory, or fewer layers");
}

// `reference` with one output element nudged: what a subtly wrong kernel looks like.
class NudgedBackend final : public AttentionBackend {
 public:
  explicit NudgedBackend(const BackendContext& ctx) : AttentionBackend(ctx), inner_(create_backend("reference", ctx)) {}
  std::string name() const override { return "nudged"; }
  Capabilities capabilities() const override { return Registry::global().get("reference").capabilities(); }

 protected:
  void plan(const ForwardBatch& batch) override { inner_->init_forward_metadata(batch); }
  void run_extend(int layer, const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out) override {
    inner_->forward_extend(layer, q, k, v, out);
    store_from_float(out.data, out.dtype, out.numel() - 1, load_as_float(out.data, out.dtype, out.numel() - 1) + 0.25f);
  }

 private:
  std::unique_ptr<AttentionBackend> inner_;
};

TEST(Replay, VerifyCatchesAWrongOutput) {
  if (!has_backend("nudged")) {
    Registry::global().add({.name = "nudged",
                            .description = "reference with one element off (test only)",
                            .device = Device::cpu,
                            .capabilities = [] { return Registry::global().get("reference").capabilities(); },
                            .why_unavailable = {},
                            .create = [](const BackendContext& ctx) -> std::unique_ptr<AttentionBackend> {
                              return std::make_unique<NudgedBackend>(ctx);
                            }});
  }
  const Trace t = tiny_trace(50, 2);
  ReplayResult partial;
  try {
    run_replay(t, tiny_options("nudged"), &partial);
    FAIL() << "verification passed a wrong backend";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs from reference at step 0"), std::string::npos) << e.what();
  }
  ASSERT_EQ(partial.verified.size(), 1u);
  EXPECT_FALSE(partial.verified[0].passed);
}

}  // namespace
}  // namespace attnkit::serving
