// cuda-naive against `reference` over the conformance table, and the refusal of a batch whose score
// matrix cannot fit in device memory. Skips itself where there is no CUDA device.
#include <gtest/gtest.h>

#include <string>

#include "attnkit/batch.h"
#include "attnkit/registry.h"
#include "backends/cuda_naive/backend.h"
#include "gpu_test.h"
#include "harness/check.h"

namespace attnkit {
namespace {

RequestStep step(int64_t prefix_len, int64_t num_new_tokens) {
  RequestStep s;
  s.prefix_len = prefix_len;
  s.num_new_tokens = num_new_tokens;
  return s;
}

TEST(CudaNaive, StandardCases) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  int ran = 0;
  for (const harness::CheckCase& c : harness::standard_cases()) {
    const harness::CheckResult r = harness::run_check("cuda-naive", c);
    if (!r.skipped.empty()) {
      std::cout << "[ skipped  ] " << harness::describe(c) << ": " << r.skipped << '\n';
      continue;
    }
    ++ran;
    EXPECT_TRUE(r.passed) << harness::describe(c) << ": " << r.message << " (rel err " << r.rel_err
                          << ", tolerance " << r.tolerance << ")";
  }
  EXPECT_GT(ran, 15) << "most of the table must run on cuda-naive";
}

TEST(CudaNaive, RandomLlamaCases) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const ModelSpec model = make_preset("llama3-8b", 1);
  int ran = 0;
  for (const harness::CheckCase& c : harness::random_cases(model, cuda_naive::capabilities(), 6, 7)) {
    const harness::CheckResult r = harness::run_check("cuda-naive", c);
    if (!r.skipped.empty()) continue;
    ++ran;
    EXPECT_TRUE(r.passed) << harness::describe(c) << ": " << r.message;
  }
  EXPECT_GT(ran, 0) << "cuda-naive skipped every random case";
}

// One request of 65536 new tokens on 64 query heads: 64 x 65536 x 65536 floats = 1 TiB of scores,
// more than any device holds. The plan must refuse it with the byte count, before any allocation.
TEST(CudaNaive, RefusesScoreMatrixLargerThanFreeMemory) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  constexpr int64_t kTokens = 65536;
  ModelSpec model;
  model.name = "wide";
  AttentionSpec spec;
  spec.num_qo_heads = 64;
  spec.num_kv_heads = 1;
  spec.head_dim_qk = 64;
  spec.head_dim_vo = 64;
  model.layers = {spec};
  KvCacheConfig cfg;
  cfg.num_layers = 1;
  cfg.page_size = 16;
  cfg.num_pages = static_cast<int>(kTokens / cfg.page_size);
  cfg.num_kv_heads = 1;
  cfg.head_dim_k = 64;
  cfg.head_dim_v = 64;
  cfg.device = Device::cuda;
  KvCache cache(cfg);
  const ForwardBatch batch = build_batch(cache, {step(0, kTokens)});
  auto backend = create_backend("cuda-naive", {&model, &cache});
  const std::string expected_bytes = std::to_string(uint64_t{64} * kTokens * kTokens * 4);  // 1099511627776
  try {
    backend->init_forward_metadata(batch);
    FAIL() << "a 1 TiB score matrix was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cuda-naive: the score matrices need " + expected_bytes + " bytes"), std::string::npos)
        << what;
  }
  EXPECT_EQ(backend->workspace_bytes(), 0u) << "nothing may be allocated for a refused batch";
}

TEST(CudaNaive, WorkspaceHoldsEveryRequestsScores) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  ModelSpec model = make_preset("llama3-8b", 1);
  const AttentionSpec& spec = model.layers[0];
  KvCacheConfig cfg = KvCacheConfig::for_spec(spec);
  cfg.page_size = 16;
  cfg.num_pages = 64;
  cfg.device = Device::cuda;
  KvCache cache(cfg);
  const ForwardBatch batch = build_batch(cache, {step(0, 100), step(300, 1)});
  CudaNaiveBackend backend({&model, &cache});
  backend.init_forward_metadata(batch);
  // Request 0: 100 queries x 100 keys; request 1: 1 query x 301 keys.
  const size_t scores = size_t(spec.num_qo_heads) * (100 * 100 + 1 * 301) * sizeof(float);
  EXPECT_EQ(backend.score_bytes(batch), scores);
  EXPECT_GE(backend.workspace_bytes(), scores);
}

}  // namespace
}  // namespace attnkit
