// `attnkit replay`: a trace driven through one backend (or a prefill/decode pair) step by step,
// every layer of a model preset per step, on a virtual clock that advances by each step's measured
// time. The scheduler is scheduler.h; the per-step work is step_runner.h; figures are metrics.h.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "attnkit/context_parallel.h"
#include "attnkit/dtype.h"
#include "attnkit/spec.h"
#include "serving/metrics.h"
#include "serving/scheduler.h"
#include "serving/trace.h"

namespace attnkit::serving {

struct ReplayOptions {
  std::string backend = "auto";   // registry name or auto; ignored when both phase backends are set
  std::string prefill_backend;    // both set: a hybrid pair (extend/mixed steps and decode steps)
  std::string decode_backend;
  ModelSpec model;
  int page_size = 16;
  DType dtype = DType::bf16;      // q, k, v, out
  DType kv_dtype = DType::bf16;   // the cache
  LatentFormat latent_format = LatentFormat::plain;  // MLA: an e4m3 cache's layout
  int64_t kv_pages = 0;           // 0: kv_memory_bytes / bytes of one page over all layers
  double kv_memory_bytes = 0.0;   // 0: 24 GiB on a GPU, 1 GiB on the CPU
  SchedulerConfig scheduler;
  bool gemms = true;              // GPU: the layer's matrix products (cuBLAS) around attention; CPU: off
  bool verify = false;            // compare sampled steps against `reference`; a mismatch fails the run
  int verify_every = 64;          // a step is checked when step % verify_every == 0, or is its mode's first
  int verify_max = 8;             // at most this many checked steps
  uint64_t seed = 1;
  // Context parallelism: > 1 runs that many ranks in this process, one after another on the
  // backend's device, each with its own cache of the KV memory above (by default the device's
  // default shared out) holding a share of every request's pages; prompts then run whole
  // (SchedulerConfig::chunked_prefill off) and the layer GEMMs are off.
  int cp_ranks = 1;
  ShareKind cp_share = ShareKind::interleaved;
  int cp_pages_per_run = 16;      // ShareKind::contiguous: pages a run
  // Called after every step (for a progress bar); may be empty.
  std::function<void(int64_t finished, int64_t total, int64_t steps, double clock_s)> on_step;
};

struct VerifyRecord {
  int64_t step = 0;
  int layer = 0;
  std::string mode;
  int batch_size = 0;
  double rel_err = 0.0;     // max |out - ref| / max |ref|
  double tolerance = 0.0;
  bool passed = false;
  std::string message;      // on failure: the worst element, its index and both values
};

struct ReplayResult {
  std::string label;        // "cpu", or "planned+cpu" for a hybrid pair
  std::string prefill_backend;
  std::string decode_backend;
  std::string device;
  std::string skipped;      // non-empty: not run, and why
  std::string model;
  int num_layers = 0;
  bool gemms = false;       // whether the non-attention matrix products ran
  int64_t kv_pages = 0;      // of one rank's cache under context parallelism
  int page_size = 0;
  double kv_capacity_bytes = 0.0;  // likewise
  int cp_ranks = 1;
  std::vector<double> rank_peak_kv_bytes;  // [cp_ranks] the most KV memory each rank held at once
  double page_bytes = 0.0;  // one page over all layers (K and V)
  double weight_bytes = 0.0;  // the GEMM weights held on the device (one layer's, shared by all)
  double peak_workspace_bytes = 0.0;
  std::vector<StepRecord> steps;
  std::vector<RequestRecord> requests;
  std::vector<float> itl_s;
  std::vector<VerifyRecord> verified;
  int64_t num_preemptions = 0;
  int peak_pages = 0;
  double wall_s = 0.0;      // real time the replay took (verification included)
  Summary summary;
};

// Replays `trace` with the options' backend. Returns a skipped result when the backend is not
// available or does not support the model; throws attnkit::Error on a verification failure (after
// filling `failed` when given), a lost request or a leaked page.
ReplayResult run_replay(const Trace& trace, const ReplayOptions& options, ReplayResult* failed = nullptr);

// The default KV memory for a device (see ReplayOptions::kv_memory_bytes).
double default_kv_memory_bytes(Device device);

}  // namespace attnkit::serving
