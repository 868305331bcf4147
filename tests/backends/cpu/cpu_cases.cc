// The `cpu` backend's check cases (see cpu_cases.h).
#include "backends/cpu/cpu_cases.h"

#include <utility>

namespace attnkit::cpu_test {

namespace {

AttentionSpec heads(int q, int kv, int dim) { return AttentionSpec::dense(q, kv, dim); }

harness::CheckCase make(std::string label, AttentionSpec spec, DType dtype,
                        std::vector<std::pair<int64_t, int64_t>> requests) {
  harness::CheckCase c;
  c.label = std::move(label);
  c.spec = std::move(spec);
  c.q_dtype = dtype;
  c.kv_dtype = dtype;
  c.requests = std::move(requests);
  c.num_layers = 1;
  return c;
}

}  // namespace

std::vector<harness::CheckCase> cpu_cases() {
  std::vector<harness::CheckCase> cases;
  const AttentionSpec gqa = heads(8, 2, 128);
  cases.push_back(make("split decode f32", gqa, DType::f32, {{2999, 1}}));
  cases.push_back(make("split decode bf16, two requests", gqa, DType::bf16, {{1500, 1}, {700, 1}}));
  cases.push_back(make("split decode f16, group 8", heads(16, 2, 128), DType::f16, {{1100, 1}, {45, 1}}));
  {
    auto c = make("split decode, sinks", gqa, DType::f32, {{1200, 1}});
    c.spec.sinks = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, 1.5f, 0.25f, -0.5f};
    cases.push_back(c);
  }
  {
    auto c = make("split decode, window 700, soft-cap", gqa, DType::f32, {{1500, 1}});
    c.spec.window_left = 700;
    c.spec.logits_soft_cap = 20.0f;
    cases.push_back(c);
  }
  {
    auto c = make("split decode e4m3", gqa, DType::bf16, {{1300, 1}});
    c.kv_dtype = DType::e4m3;
    c.k_scale = 0.25f;
    c.v_scale = 0.5f;
    c.tolerance = 2e-2;
    cases.push_back(c);
  }
  {
    AttentionSpec mla = heads(16, 1, 576);
    mla.kv_lora_rank = 512;
    mla.qk_rope_head_dim = 64;
    mla.head_dim_vo = 512;
    mla.sm_scale = 0.07f;
    cases.push_back(make("MLA split decode", mla, DType::f32, {{900, 1}}));
    cases.push_back(make("MLA extend", mla, DType::bf16, {{100, 9}}));
  }
  cases.push_back(make("extend, many row blocks f32", heads(4, 1, 64), DType::f32, {{0, 200}, {150, 90}}));
  {
    auto c = make("extend, window across tiles", gqa, DType::f32, {{130, 150}});
    c.spec.window_left = 77;
    cases.push_back(c);
  }
  {
    auto c = make("extend, sinks and soft-cap", gqa, DType::f16, {{64, 70}});
    c.spec.sinks = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, 1.5f, 0.25f, -0.5f};
    c.spec.logits_soft_cap = 10.0f;
    cases.push_back(c);
  }
  {
    auto c = make("extend, non-causal window", heads(4, 4, 80), DType::f32, {{90, 40}});
    c.spec.causal = false;
    c.spec.window_left = 20;
    cases.push_back(c);
  }
  {
    auto c = make("chunked prefill: few new tokens on a long prefix (split)", gqa, DType::f32, {{2500, 5}});
    cases.push_back(c);
  }
  {
    auto c = make("custom mask across tiles", gqa, DType::bf16, {{150, 20}, {0, 70}});
    c.custom_mask = true;
    cases.push_back(c);
  }
  {
    // bf16 q and cache take vdpbf16ps where the CPU has it: odd tile lengths, a window, soft-cap.
    cases.push_back(make("extend bf16, odd tiles", gqa, DType::bf16, {{100, 150}, {37, 61}}));
    auto c = make("extend bf16, window and soft-cap", gqa, DType::bf16, {{130, 150}});
    c.spec.window_left = 90;
    c.spec.logits_soft_cap = 30.0f;
    cases.push_back(c);
  }
  {
    // bf16 decode takes vdpbf16ps too: groups of 3, 5 and 8, one KV head, head_dim 96 (a
    // 32-column tail), odd split chunks and tiles, sinks, a window and soft-cap.
    cases.push_back(make("decode bf16, group 3, head_dim 96", heads(6, 2, 96), DType::bf16, {{1301, 1}, {37, 1}}));
    cases.push_back(make("decode bf16, one KV head, group 5", heads(5, 1, 64), DType::bf16, {{907, 1}, {70, 1}}));
    auto c = make("decode bf16, group 8, sinks, window, soft-cap", heads(16, 2, 64), DType::bf16, {{1777, 1}});
    c.spec.sinks = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, 1.5f, 0.25f, -0.5f, 1.0f, -2.0f, 0.75f, 0.1f, -0.3f, 2.5f, 0.0f, 1.2f};
    c.spec.window_left = 900;
    c.spec.logits_soft_cap = 25.0f;
    cases.push_back(c);
  }
  return cases;
}

std::vector<harness::CheckCase> cpu_small_cases() {
  std::vector<harness::CheckCase> cases;
  const AttentionSpec gqa = heads(4, 2, 64);
  cases.push_back(make("small decode f32, split", gqa, DType::f32, {{600, 1}}));
  cases.push_back(make("small decode bf16, two requests", gqa, DType::bf16, {{90, 1}, {33, 1}}));
  cases.push_back(make("small decode f16, group 3, head_dim 96", heads(6, 2, 96), DType::f16, {{70, 1}}));
  {
    auto c = make("small decode e4m3, sinks, soft-cap", gqa, DType::bf16, {{80, 1}});
    c.kv_dtype = DType::e4m3;
    c.k_scale = 0.25f;
    c.v_scale = 0.5f;
    c.tolerance = 2e-2;
    c.spec.sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    c.spec.logits_soft_cap = 20.0f;
    cases.push_back(c);
  }
  cases.push_back(make("small extend f32", heads(2, 1, 64), DType::f32, {{20, 70}}));
  {
    auto c = make("small extend bf16, window", gqa, DType::bf16, {{10, 37}});
    c.spec.window_left = 20;
    cases.push_back(c);
  }
  return cases;
}

}  // namespace attnkit::cpu_test
