// The smallest model the serving tests replay: GQA with 2 query heads on 1 KV head of 8 dims, so
// `reference` runs thousands of requests in a second; and the short-request trace they replay.
#pragma once

#include <random>
#include <string>

#include "attnkit/registry.h"
#include "attnkit/spec.h"
#include "serving/trace.h"

namespace attnkit::serving::testing {

inline ModelSpec tiny_model(int layers) {
  AttentionSpec s;
  s.num_qo_heads = 2;
  s.num_kv_heads = 1;
  s.head_dim_qk = 8;
  s.head_dim_vo = 8;
  ModelSpec m;
  m.name = "tiny";
  m.layers.assign(static_cast<size_t>(layers), s);
  return m;
}

// n requests of 1-24 prompt and 1-12 output tokens, arriving far faster than steps run: the queue
// grows and a small cache must preempt.
inline Trace tiny_trace(int n, uint64_t seed) {
  Trace t;
  t.name = "synthetic";
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> prompt(1, 24), output(1, 12);
  std::exponential_distribution<double> gap(200000.0);
  double now = 0.0;
  for (int i = 0; i < n; ++i) {
    t.requests.push_back({.id = i, .arrival_s = now, .prompt_len = prompt(rng), .output_len = output(rng), .hash_ids = {}});
    now += gap(rng);
  }
  return t;
}

inline bool has_backend(const std::string& name) {
  for (const auto& n : Registry::global().names()) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace attnkit::serving::testing
