// The benchmark harness behind `attnkit bench`: one workload (phase, batch, lengths) on one backend,
// warm-up, repeats on rotating fresh inputs, the median, and the figures derived from it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/backend.h"
#include "attnkit/spec.h"
#include "attnkit/tensor.h"

#include <utility>

namespace attnkit::harness {

enum class Phase { prefill, decode, mixed };

struct Workload {
  Phase phase = Phase::decode;
  ModelSpec model;                 // attention of its first layer is timed
  DType q_dtype = DType::bf16;
  DType kv_dtype = DType::bf16;
  LatentFormat latent_format = LatentFormat::plain;  // MLA e4m3 caches
  int page_size = 16;
  // (prefix_len, num_new_tokens) per request; prefill: (0, n), decode: (kv_len - 1, 1).
  std::vector<std::pair<int64_t, int64_t>> requests;
  std::string label;               // "decode 64 x 16384"
};

// The workload of `phase` for batch_size requests of kv_len tokens (prefill: qo_len == kv_len).
Workload make_workload(const ModelSpec& model, Phase phase, int batch_size, int64_t kv_len, int page_size = 16,
                       DType dtype = DType::bf16);

// Parses "PREFIX+NEW[xCOUNT],..." (e.g. "127+1x32,8191+1x32"); throws attnkit::Error naming the
// bad item. The label becomes "requests <text>".
Workload make_workload(const ModelSpec& model, Phase phase, const std::string& requests, int page_size = 16,
                       DType dtype = DType::bf16);

struct BenchOptions {
  int warmup = 3;
  int repeats = 20;
  int input_sets = 4;              // fresh q/k/v sets rotated between repeats
  double max_seconds = 20.0;       // a slow backend stops repeating after this (at least one run)
  // Run, untimed, just before each timed call of a host backend (e.g. a pass of the read probe,
  // which both measures the bandwidth of that moment and leaves the caches cold); what it returns
  // is kept in BenchResult::paired, beside the call's time.
  std::function<double()> before_each_call;
  BackendOptions backend_options;  // the backend's own switches (attnkit/backend.h)
  // GPU backends: the last timed call's decode timeline (BackendOptions::decode_timeline), as CSV
  // in this file; empty: none is recorded.
  std::string decode_timeline;
};

struct BenchResult {
  std::string backend;
  std::string workload;
  std::string skipped;             // non-empty: not run, and why
  int batch_size = 0;              // requests in the workload
  double kv_tokens = 0.0;          // KV tokens of all requests after the step (prefix + new)
  int repeats = 0;                 // timed calls behind the median
  double first_call_ms = 0.0;      // the backend's first call, waited for (jit: compile or cache load, and tuning)
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  std::vector<double> call_ms;     // the timed calls, in order
  std::vector<double> paired;      // before_each_call's value before each of them
  double flops = 0.0;              // unmasked FLOPs of one call (causal: the visible half)
  double bytes = 0.0;              // KV bytes read + q/out bytes of one call
  double tokens_per_s = 0.0;       // new tokens a second
  double flop_per_s = 0.0;
  double bytes_per_s = 0.0;
  double workspace_bytes = 0.0;    // device/host memory the backend asked for beyond the cache
  double peak_rss_bytes = 0.0;     // host peak resident set after the run (inputs and cache included)
  double backend_host_bytes = 0.0; // host resident memory the backend added (creation to warm-up)
  double plan_us = 0.0;            // host time of init_forward_metadata (validation + plan)
  double plan_step_us = 0.0;       // the same for the next decode steps (decode batches only)
  // GPU backends: a call's host time, its launches queued and not waited for (median of a few
  // back to back): what a call adds to the host's side of a step (jit: the tuned kernel's lookup).
  double call_host_us = 0.0;
};

BenchResult run_bench(const std::string& backend, const Workload& workload, const BenchOptions& options);

// Unmasked FLOPs and minimal bytes of one attention call over `workload`.
double workload_flops(const Workload& workload);
double workload_bytes(const Workload& workload);

}  // namespace attnkit::harness
