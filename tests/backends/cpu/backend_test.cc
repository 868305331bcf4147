// The `cpu` backend against `reference` where its own machinery shows: split-KV chunks and their
// merge (with sinks, windows, soft-cap, e4m3, MLA), several row blocks and tiles, fully masked rows,
// and bit-identical results whatever the number of threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "attnkit/registry.h"
#include "backends/cpu/backend.h"
#include "backends/cpu/cpu_cases.h"
#include "backends/reference/backend.h"
#include "harness/check.h"
#include "harness/device_copy.h"

namespace attnkit {
namespace {

using cpu_test::cpu_cases;

AttentionSpec heads(int q, int kv, int dim) { return AttentionSpec::dense(q, kv, dim); }

TEST(CpuBackend, MatchesReferenceOnSplitAndTiledCases) {
  for (const harness::CheckCase& c : cpu_cases()) {
    const harness::CheckResult r = harness::run_check("cpu", c);
    ASSERT_TRUE(r.skipped.empty()) << c.label << ": " << r.skipped;
    EXPECT_TRUE(r.passed) << c.label << ": rel error " << r.rel_err << " > " << r.tolerance << "; " << r.message;
  }
}

// The fp32 products must stay right on machines with AVX512-BF16 too, where bf16 normally skips them.
TEST(CpuBackend, Fp32ProductsMatchReferenceWhenBf16DotIsOff) {
  BackendOptions f32_products;
  f32_products.cpu_bf16_dot = false;
  int ran = 0;
  for (const harness::CheckCase& c : cpu_cases()) {
    if (c.q_dtype != DType::bf16) continue;
    const harness::CheckResult r = harness::run_check("cpu", c, f32_products);
    ++ran;
    EXPECT_TRUE(r.passed) << c.label << ": rel error " << r.rel_err << " > " << r.tolerance << "; " << r.message;
  }
  EXPECT_GT(ran, 0) << "no bf16 case in the table";
}

TEST(CpuBackend, CapabilitiesAreHonest) {
  const Capabilities c = cpu::capabilities();
  EXPECT_EQ(c.device, Device::cpu);
  EXPECT_TRUE(c.mla);
  EXPECT_FALSE(c.cuda_graph);
  EXPECT_EQ(c.kv_dtypes.size(), 4u);
  EXPECT_EQ(Registry::global().get("cpu").name, "cpu");
}

// One batch on one cache, run by a CpuBackend on a pool of the given size.
struct CpuRun {
  ModelSpec model;
  std::unique_ptr<KvCache> cache;
  ForwardBatch batch;
  std::unique_ptr<harness::Staged> q, k, v;

  CpuRun(const AttentionSpec& spec, const std::vector<RequestStep>& steps, DType dtype) {
    model.name = "test";
    model.layers = {spec};
    KvCacheConfig c = KvCacheConfig::for_spec(spec);
    c.num_pages = 600;
    c.page_size = 16;
    c.dtype = dtype;
    cache = std::make_unique<KvCache>(c);
    cache->allocator().shuffle(3);
    batch = build_batch(*cache, steps);
    std::vector<int64_t> slots;
    for (int i = 0; i < batch.batch_size(); ++i) {
      for (int64_t t = 0; t < batch.prefix_lens[i]; ++t) slots.push_back(batch.slot(i, t));
    }
    const auto n_prefix = static_cast<int64_t>(slots.size());
    harness::Staged pk(Device::cpu, DType::f32, {n_prefix, spec.num_kv_heads, spec.head_dim_qk});
    harness::Staged pv(Device::cpu, DType::f32, {n_prefix, spec.num_kv_heads, spec.head_dim_vo});
    harness::fill_uniform(pk.host(), 11, -1, 1);
    harness::fill_uniform(pv.host(), 12, -1, 1);
    cache->store(0, pk.host(), pv.host(), TensorView(slots.data(), DType::i64, Device::cpu, {n_prefix}));
    const int64_t n = batch.num_tokens();
    q = std::make_unique<harness::Staged>(Device::cpu, dtype, std::vector<int64_t>{n, spec.num_qo_heads, spec.head_dim_qk});
    k = std::make_unique<harness::Staged>(Device::cpu, dtype, std::vector<int64_t>{n, spec.num_kv_heads, spec.head_dim_qk});
    v = std::make_unique<harness::Staged>(Device::cpu, dtype, std::vector<int64_t>{n, spec.num_kv_heads, spec.head_dim_vo});
    harness::fill_uniform(q->host(), 21, -2, 2);
    harness::fill_uniform(k->host(), 22, -1, 1);
    harness::fill_uniform(v->host(), 23, -1, 1);
  }

  // Output bytes of `backend` (poisoned first, so every element must be written).
  std::vector<uint8_t> forward(AttentionBackend& backend) {
    const AttentionSpec& s = model.layer(0);
    harness::Staged out(Device::cpu, q->host().dtype, {batch.num_tokens(), s.num_qo_heads, s.head_dim_vo});
    out.poison();
    backend.init_forward_metadata(batch);
    backend.forward(0, q->host(), k->host(), v->host(), out.host());
    const auto* bytes = static_cast<const uint8_t*>(out.host_data());
    return std::vector<uint8_t>(bytes, bytes + out.host().nbytes());
  }
};

TEST(CpuBackend, SameBitsWhateverTheThreadCount) {
  const AttentionSpec gqa = heads(8, 2, 128);
  struct Setup {
    const char* label;
    std::vector<RequestStep> steps;
  };
  const std::vector<Setup> setups = {
      {"split decode", {{.prefix_len = 3000, .num_new_tokens = 1, .custom_mask = {}}, {.prefix_len = 40, .num_new_tokens = 1, .custom_mask = {}}}},
      {"extend", {{.prefix_len = 100, .num_new_tokens = 150, .custom_mask = {}}, {.prefix_len = 2000, .num_new_tokens = 3, .custom_mask = {}}}},
  };
  for (const Setup& setup : setups) {
    for (DType dtype : {DType::f32, DType::bf16}) {  // bf16: the vdpbf16ps path where the CPU has it
      CpuRun run(gqa, setup.steps, dtype);
      std::vector<std::vector<uint8_t>> outs;
      for (int threads : {1, 2, 3, 7}) {
        cpu::ThreadPool pool(threads);
        CpuBackend backend(BackendContext{&run.model, run.cache.get()}, &pool);
        outs.push_back(run.forward(backend));
      }
      for (size_t i = 1; i < outs.size(); ++i) {
        EXPECT_EQ(outs[i], outs[0]) << setup.label << " " << dtype_name(dtype) << ": thread counts give different bits";
      }
    }
  }
}

// The LSE of rows written whole and of rows split over KV chunks and merged (the 3000-key decode
// splits), against the reference's; with sinks, which the LSE leaves out, and a soft-cap.
TEST(CpuBackend, LseMatchesReference) {
  AttentionSpec spec = heads(8, 2, 64);
  spec.sinks = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f, 0.25f, 3.0f};
  spec.logits_soft_cap = 20.0f;
  const std::vector<RequestStep> steps = {{.prefix_len = 3000, .num_new_tokens = 1, .custom_mask = {}},
                                          {.prefix_len = 30, .num_new_tokens = 1, .custom_mask = {}}};
  CpuRun run(spec, steps, DType::f32);
  std::vector<float> lse[2];
  int idx = 0;
  for (const char* name : {"reference", "cpu"}) {
    auto backend = create_backend(name, {&run.model, run.cache.get()});
    harness::Staged out(Device::cpu, DType::f32, {2, 8, 64});
    lse[idx].assign(16, NAN);
    backend->init_forward_metadata(run.batch);
    backend->forward(0, run.q->host(), run.k->host(), run.v->host(), out.host(),
                     TensorView(lse[idx].data(), DType::f32, Device::cpu, {2, 8}));
    ++idx;
  }
  // f32 accumulation over 3000 terms: the logits' rounding, a few units of 2^-24 times their size.
  for (size_t i = 0; i < 16; ++i) EXPECT_NEAR(lse[1][i], lse[0][i], 1e-4) << i;
}

TEST(CpuBackend, FullyMaskedRowsGiveZeros) {
  AttentionSpec spec = heads(4, 2, 64);
  spec.sinks = {1.0f, -1.0f, 0.5f, 2.0f};
  const int64_t prefix = 10;
  const int64_t n = 4;
  std::vector<uint8_t> mask(static_cast<size_t>(n * (prefix + n)), 1);
  for (int64_t t = 0; t < prefix + n; ++t) mask[static_cast<size_t>(2 * (prefix + n) + t)] = 0;  // row 2 sees nothing
  CpuRun run(spec, {{.prefix_len = prefix, .num_new_tokens = n, .custom_mask = mask}}, DType::f32);
  CpuBackend cpu_backend(BackendContext{&run.model, run.cache.get()});
  const std::vector<uint8_t> got = run.forward(cpu_backend);
  ReferenceBackend reference(BackendContext{&run.model, run.cache.get()});
  const std::vector<uint8_t> want = run.forward(reference);
  const auto* g = reinterpret_cast<const float*>(got.data());
  const auto* w = reinterpret_cast<const float*>(want.data());
  const int64_t row = int64_t{spec.num_qo_heads} * spec.head_dim_vo;
  for (int64_t e = 0; e < n * row; ++e) {
    if (e / row == 2) {
      ASSERT_EQ(g[e], 0.0f) << "masked row element " << e;
    } else {
      ASSERT_NEAR(g[e], w[e], 1e-5) << "element " << e;
    }
  }
}

}  // namespace
}  // namespace attnkit
