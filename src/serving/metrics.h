// What a replay measures: one record per step and per request, and the summary figures drawn from
// them (TTFT, TPOT, ITL percentiles, output tokens/s, memory, scheduler overhead).
#pragma once

#include <cstdint>
#include <vector>

namespace attnkit::serving {

struct StepRecord {
  int batch_size = 0;
  int num_tokens = 0;       // new tokens in the step
  int num_decode = 0;
  int num_prefill = 0;
  int64_t kv_tokens = 0;    // sum of the requests' KV lengths after the step
  int max_kv_len = 0;
  float step_ms = 0.0f;     // wall time: scheduling, planning, every layer, synchronisation, completion
  float attn_ms = 0.0f;     // attention calls only, summed over layers (CUDA events on the GPU)
  float gemm_ms = 0.0f;     // the layers' matrix products (GPU time between attention calls)
  float sched_ms = 0.0f;    // host: schedule + build_batch + init_forward_metadata (the plan) + complete
};

struct RequestRecord {
  double arrival_s = 0.0;
  double ttft_s = 0.0;      // first output token - arrival
  double queue_s = 0.0;     // admission (first step) - arrival: the part of the TTFT spent waiting
  double tpot_s = 0.0;      // (finish - first token) / (outputs - 1); 0 for one-token outputs
  double e2e_s = 0.0;       // finish - arrival
  int64_t prompt_len = 0;
  int64_t output_len = 0;
  int num_preemptions = 0;
};

struct Percentiles {
  double p50 = 0.0, p90 = 0.0, p99 = 0.0, mean = 0.0, max = 0.0;
};

// Linear interpolation between order statistics (numpy's default); all zeros for no values.
Percentiles percentiles(std::vector<double> values);

struct Summary {
  int64_t num_requests = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t num_steps = 0;
  double makespan_s = 0.0;           // virtual clock from the first arrival to the last finish
  double output_tokens_per_s = 0.0;
  double total_tokens_per_s = 0.0;   // prompt + output tokens / makespan
  Percentiles ttft_s, tpot_s, itl_s, e2e_s;
  // The TTFT split: waiting for admission (queue), and from admission to the first token (the
  // prefill's steps, and any recompute after a preemption): the part the backends decide.
  Percentiles queue_s, admitted_ttft_s;
  double peak_kv_bytes = 0.0;
  double peak_workspace_bytes = 0.0;
  double attn_fraction = 0.0;        // attention time / step time, over all steps
  // Scheduler overhead: host scheduling + planning time over step time.
  double sched_fraction = 0.0;       // over all steps
  double sched_us_p50 = 0.0;
  double sched_fraction_large = 0.0; // over steps of >= kLargeBatch requests (0 when there are none)
  int64_t large_steps = 0;
  int max_batch_size = 0;
};

inline constexpr int kLargeBatch = 256;

Summary summarize(const std::vector<StepRecord>& steps, const std::vector<RequestRecord>& requests,
                  const std::vector<float>& itl_s, double peak_kv_bytes, double peak_workspace_bytes);

}  // namespace attnkit::serving
