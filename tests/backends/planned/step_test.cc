// Successive decode steps on the `planned` backend: a plan derived from the last one (each request
// one position longer: the same chunks, each unit's last one longer) gives what a full plan of the
// same batch gives, step after step, and a batch that is not the next step is planned in full.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attnkit/registry.h"
#include "backends/planned/backend.h"
#include "gpu_test.h"
#include "harness/check.h"
#include "harness/device_copy.h"

namespace attnkit {
namespace {

constexpr int kRequests = 64;

// The values of t, downloaded, as floats.
std::vector<float> download(harness::Staged& t) {
  t.download();
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_as_float(t.host_data(), t.host().dtype, static_cast<int64_t>(i));
  return out;
}

TEST(PlannedSteps, DerivedPlansMatchFullPlansStepAfterStep) {
  ATTNKIT_SKIP_WITHOUT_GPU();
  const AttentionSpec spec = AttentionSpec::dense(32, 8, 128);
  ModelSpec model;
  model.name = "steps";
  model.layers = {spec};
  KvCacheConfig cfg = KvCacheConfig::for_spec(spec, /*num_layers=*/1);
  cfg.num_pages = kRequests * 200;  // pages of 16, the default
  cfg.device = Device::cuda;
  KvCache cache(cfg);
  cache.allocator().shuffle(9);

  // The first step: new requests of 1000-3000 cached tokens (random K/V) and one new token each.
  std::mt19937_64 rng(5);
  std::vector<RequestStep> steps;
  for (int i = 0; i < kRequests; ++i) {
    steps.push_back({.id = -1, .prefix_len = std::uniform_int_distribution<int64_t>(1000, 3000)(rng), .num_new_tokens = 1, .custom_mask = {}});
  }
  ForwardBatch batch = build_batch(cache, steps);
  harness::fill_prefix(cache, batch, spec, 1);

  auto stepped = create_backend("planned", {&model, &cache});
  auto& planned = static_cast<PlannedBackend&>(*stepped);
  const std::vector<int64_t> dims = {kRequests, 32, 128}, kv_dims = {kRequests, 8, 128};
  harness::Staged q(Device::cuda, DType::bf16, dims), k(Device::cuda, DType::bf16, kv_dims),
      v(Device::cuda, DType::bf16, kv_dims), out(Device::cuda, DType::bf16, dims);
  int most_steps = 0;
  for (int step = 0; step < 12; ++step) {
    if (step > 0) {
      for (int i = 0; i < kRequests; ++i) steps[static_cast<size_t>(i)] = {.id = batch.request_ids[static_cast<size_t>(i)], .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}};
      batch = build_batch(cache, steps);
    }
    harness::fill_uniform(q.host(), 100 + static_cast<uint64_t>(step), -2.0f, 2.0f);
    harness::fill_uniform(k.host(), 200 + static_cast<uint64_t>(step), -1.0f, 1.0f);
    harness::fill_uniform(v.host(), 300 + static_cast<uint64_t>(step), -1.0f, 1.0f);
    q.upload();
    k.upload();
    v.upload();
    stepped->init_forward_metadata(batch);
    most_steps = std::max(most_steps, planned.plan_steps());
    out.poison();
    stepped->forward_decode(0, q.dev(), k.dev(), v.dev(), out.dev());
    stepped->synchronize();
    const std::vector<float> got = download(out);

    // The same step planned in full by a backend with no plan to derive from (it stores the same
    // K/V rows again, into the same slots).
    auto full = create_backend("planned", {&model, &cache});
    full->init_forward_metadata(batch);
    ASSERT_EQ(static_cast<PlannedBackend&>(*full).plan_steps(), 0);
    out.poison();
    full->forward_decode(0, q.dev(), k.dev(), v.dev(), out.dev());
    full->synchronize();
    const std::vector<float> want = download(out);
    double max_err = 0.0, max_ref = 0.0;
    for (size_t e = 0; e < want.size(); ++e) {
      ASSERT_FALSE(std::isnan(got[e])) << "step " << step << ": element " << e << " not written";
      max_err = std::max(max_err, static_cast<double>(std::fabs(got[e] - want[e])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[e])));
    }
    // Both accumulate in f32 and round to bf16; only where the splits differ do the sums differ.
    EXPECT_LE(max_err, 2.0 * std::ldexp(max_ref, -8)) << "step " << step << ": max error " << max_err;
  }
  EXPECT_GE(most_steps, 3) << "the steps were planned in full: the derived plan went untested";

  // Not the next step (one request two positions longer): planned in full.
  steps[0].num_new_tokens = 2;
  for (size_t i = 1; i < steps.size(); ++i) steps[i].num_new_tokens = 0;
  const ForwardBatch other = build_batch(cache, steps);
  stepped->init_forward_metadata(other);
  EXPECT_EQ(planned.plan_steps(), 0);
}

}  // namespace
}  // namespace attnkit
