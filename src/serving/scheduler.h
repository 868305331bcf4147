// The continuous-batching scheduler of `attnkit replay`: admits requests by arrival, cuts prompts
// into chunks under a token budget, grows and frees KV pages, and preempts (frees, recomputes later)
// when the cache is full. It knows the page pool (one cache, or a context-parallel group's) and
// nothing of any backend; timing lives in replay.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <vector>

#include "attnkit/batch.h"
#include "attnkit/kv_cache.h"
#include "serving/page_pool.h"
#include "serving/trace.h"

namespace attnkit::serving {

struct SchedulerConfig {
  int max_batch_size = 256;      // requests running at once (each holds KV pages)
  int64_t token_budget = 8192;   // new tokens a step: one per decoding request, the rest prefill chunks
  // Pages kept free when admitting a new request, so running requests can grow a while before
  // anyone is preempted (vLLM keeps 1% the same way). 0: 1% of the cache, at least one page.
  int watermark_pages = 0;
  // false: a prompt (or a recompute) runs whole in one step, never cut into chunks, so that every
  // prefill starts from an empty history (context-parallel prefill needs that); each request's
  // prompt + output must then fit the token budget.
  bool chunked_prefill = true;
};

// One request's progress. A token is produced when every known token (the prompt and the outputs
// so far) is in the cache; after a preemption the known tokens are computed again as a prefill,
// which then produces the next output token (recompute, as vLLM does).
struct Sequence {
  const TraceRequest* request = nullptr;  // never null; owned by the trace
  RequestId cache_id = -1;                // -1 while it holds no pages
  int64_t computed = 0;                   // tokens in the KV cache
  int64_t generated = 0;                  // output tokens produced
  int num_preemptions = 0;
  double admitted_s = -1.0;     // when it first joined a step (a preemption does not reset it)
  double first_token_s = -1.0;
  double last_token_s = -1.0;
  double finish_s = -1.0;
  int64_t known() const { return request->prompt_len + generated; }
  bool finished() const { return generated >= request->output_len; }
};

struct ScheduledStep {
  ForwardBatch batch;              // built from the cache: pages for this step's tokens are allocated
  std::vector<int> seqs;           // [batch_size] index into Scheduler::sequences()
  int num_decode = 0;              // requests with one new token that produces an output
  int num_prefill = 0;             // requests with a prompt (or recompute) chunk
  int num_preempted = 0;           // requests preempted while building this step
};

class Scheduler {
 public:
  // `trace` and `pool` must outlive the scheduler; every request must fit the pool on its own.
  Scheduler(const Trace& trace, PagePool& pool, const SchedulerConfig& config);

  // The next step at time `now` (seconds), or nothing when no arrived request can run (idle until
  // next_arrival_s()). Admits arrived requests first-come first-served.
  std::optional<ScheduledStep> schedule(double now);
  // Marks the step's tokens computed at time `now`, records produced tokens, frees finished requests.
  void complete(const ScheduledStep& step, double now);

  bool done() const { return num_finished_ == static_cast<int64_t>(seqs_.size()); }
  double next_arrival_s() const;
  // Throws attnkit::Error unless every request finished with all its tokens and the cache holds no
  // request and no allocated page.
  void check_drained() const;

  const std::vector<Sequence>& sequences() const { return seqs_; }
  const std::vector<float>& inter_token_s() const { return itl_s_; }  // every gap between two outputs
  int64_t num_preemptions() const { return num_preemptions_; }
  int peak_pages() const { return peak_pages_; }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int64_t num_finished() const { return num_finished_; }

 private:
  int64_t pages_needed(const Sequence& s, int64_t new_tokens) const;
  void preempt(int seq_idx);

  PagePool& pool_;
  SchedulerConfig config_;
  int watermark_ = 1;
  std::vector<Sequence> seqs_;      // [num_requests] in arrival order
  size_t next_pending_ = 0;         // first request not yet arrived
  std::deque<int> waiting_;         // arrived, holding no pages; preempted ones go back to the front
  std::vector<int> running_;        // holding pages, in admission order (preemption takes the last)
  std::vector<float> itl_s_;
  int64_t num_finished_ = 0;
  int64_t num_preemptions_ = 0;
  int peak_pages_ = 0;
};

}  // namespace attnkit::serving
