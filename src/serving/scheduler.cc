// Scheduler: decodes first, then running prompt chunks, then new requests under the token budget;
// pages counted before build_batch allocates them, so the batch always fits; preemption frees the
// most recently admitted request and puts it back at the front of the queue.
#include "serving/scheduler.h"

#include <algorithm>

#include "attnkit/error.h"

namespace attnkit::serving {

Scheduler::Scheduler(const Trace& trace, PagePool& pool, const SchedulerConfig& config)
    : pool_(pool), config_(config) {
  ATTNKIT_CHECK(config.max_batch_size >= 1, "scheduler: max_batch_size must be >= 1, got ", config.max_batch_size);
  ATTNKIT_CHECK(config.token_budget >= config.max_batch_size, "scheduler: token_budget (", config.token_budget,
                ") must be >= max_batch_size (", config.max_batch_size, "), so every running request can decode");
  ATTNKIT_CHECK(config.watermark_pages >= 0, "scheduler: watermark_pages must be >= 0, got ", config.watermark_pages);
  const int num_pages = pool.capacity();
  watermark_ = config.watermark_pages > 0 ? config.watermark_pages : std::max(1, num_pages / 100);
  ATTNKIT_CHECK(pool.num_requests() == 0, "scheduler: the cache must start empty, it holds ", pool.num_requests(),
                " requests");
  seqs_.reserve(trace.requests.size());
  for (const TraceRequest& r : trace.requests) {
    ATTNKIT_CHECK(r.prompt_len >= 1 && r.output_len >= 1, "scheduler: request ", r.id,
                  " needs a prompt and an output of at least one token, got ", r.prompt_len, " and ", r.output_len);
    // The last output token is never fed back, so the cache holds at most prompt + output - 1 tokens.
    const int64_t max_len = r.prompt_len + r.output_len - 1;
    const int64_t pages = pool.pages_needed(0, max_len);
    ATTNKIT_CHECK(pages + watermark_ <= num_pages, "scheduler: request ", r.id, " grows to ", max_len,
                  " tokens (", pages, " pages), more than the cache holds beside its ", watermark_,
                  "-page watermark (", num_pages, " pages): lower the context limit or enlarge the cache");
    ATTNKIT_CHECK(config.chunked_prefill || max_len <= config.token_budget, "scheduler: request ", r.id, " grows to ",
                  max_len, " tokens, more than the token budget (", config.token_budget,
                  ") that runs a prompt whole without chunked prefill: raise the budget or lower the context limit");
    ATTNKIT_CHECK(seqs_.empty() || r.arrival_s >= seqs_.back().request->arrival_s, "scheduler: request ", r.id,
                  " arrives before the one listed before it: the trace must be sorted by arrival");
    seqs_.push_back({.request = &r});
  }
}

double Scheduler::next_arrival_s() const {
  return next_pending_ < seqs_.size() ? seqs_[next_pending_].request->arrival_s
                                      : std::numeric_limits<double>::infinity();
}

int64_t Scheduler::pages_needed(const Sequence& s, int64_t new_tokens) const {
  return pool_.pages_needed(s.cache_id >= 0 ? s.computed : 0, new_tokens);
}

void Scheduler::preempt(int seq_idx) {
  Sequence& s = seqs_[static_cast<size_t>(seq_idx)];
  pool_.free_request(s.cache_id);
  s.cache_id = -1;
  s.computed = 0;
  ++s.num_preemptions;
  ++num_preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), seq_idx));
  waiting_.push_front(seq_idx);
}

std::optional<ScheduledStep> Scheduler::schedule(double now) {
  while (next_pending_ < seqs_.size() && seqs_[next_pending_].request->arrival_s <= now) {
    waiting_.push_back(static_cast<int>(next_pending_++));
  }
  ScheduledStep st;
  std::vector<RequestStep> steps;
  std::vector<uint8_t> planned(running_.size(), 0);  // parallel to running_, kept in step with it
  int64_t budget = config_.token_budget;
  int64_t promised = 0;  // pages this step will take, not yet allocated
  auto free_pages = [&] { return pool_.num_free() - promised; };

  // Running requests: decodes first (one token each, never starved by a long prompt), then the
  // next chunk of prompts already under way.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t p = 0; p < running_.size() && budget > 0;) {
      const int idx = running_[p];
      Sequence& s = seqs_[static_cast<size_t>(idx)];
      const bool is_decode = s.known() - s.computed == 1;
      if (planned[p] || is_decode != (pass == 0)) {
        ++p;
        continue;
      }
      const int64_t n = std::min(s.known() - s.computed, budget);
      const int64_t need = pages_needed(s, n);
      bool self_preempted = false;
      while (need > free_pages()) {
        // The most recently admitted request not in this step yet gives its pages back.
        size_t q = running_.size();
        while (q > 0 && (planned[q - 1] || running_[q - 1] == idx)) --q;
        if (q == 0) {  // nobody else left to take from: this one waits
          preempt(idx);
          planned.erase(planned.begin() + static_cast<std::ptrdiff_t>(p));
          ++st.num_preempted;
          self_preempted = true;
          break;
        }
        preempt(running_[q - 1]);
        planned.erase(planned.begin() + static_cast<std::ptrdiff_t>(q - 1));
        ++st.num_preempted;
        if (q - 1 < p) --p;
      }
      if (self_preempted) continue;  // position p now holds the next request
      steps.push_back({.id = s.cache_id, .prefix_len = 0, .num_new_tokens = n, .custom_mask = {}});
      st.seqs.push_back(idx);
      planned[p] = 1;
      promised += need;
      budget -= n;
      (is_decode ? st.num_decode : st.num_prefill) += 1;
      ++p;
    }
  }

  // New (or preempted) requests, first come first served; none after a preemption this step,
  // which would only take back the pages just freed, unless nothing else would run.
  if (st.num_preempted == 0 || steps.empty()) {
    while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_batch_size && budget > 0) {
      const int idx = waiting_.front();
      Sequence& s = seqs_[static_cast<size_t>(idx)];
      if (!config_.chunked_prefill && s.known() > budget) break;  // runs whole, in a later step
      const int64_t n = std::min(s.known(), budget);
      const int64_t need = pool_.pages_needed(0, n);
      if (need > free_pages() - watermark_) break;
      waiting_.pop_front();
      running_.push_back(idx);
      if (s.admitted_s < 0) s.admitted_s = now;
      steps.push_back({.id = -1, .prefix_len = 0, .num_new_tokens = n, .custom_mask = {}});
      st.seqs.push_back(idx);
      promised += need;
      budget -= n;
      ++st.num_prefill;
    }
  }
  if (steps.empty()) {
    ATTNKIT_CHECK(running_.empty() && waiting_.empty(), "scheduler: no request could run at t=", now, " (",
                  running_.size(), " running, ", waiting_.size(), " waiting, ", pool_.num_free(),
                  " pages free): this is a scheduler bug");
    return std::nullopt;
  }
  st.batch = pool_.build_batch(steps);  // fits: every page was counted above
  for (size_t i = 0; i < st.seqs.size(); ++i) {
    Sequence& s = seqs_[static_cast<size_t>(st.seqs[i])];
    if (s.cache_id < 0) s.cache_id = st.batch.request_ids[i];
  }
  peak_pages_ = std::max(peak_pages_, pool_.pages_in_use());
  return st;
}

void Scheduler::complete(const ScheduledStep& st, double now) {
  bool any_finished = false;
  for (size_t i = 0; i < st.seqs.size(); ++i) {
    Sequence& s = seqs_[static_cast<size_t>(st.seqs[i])];
    s.computed += st.batch.qo_len(static_cast<int>(i));
    if (s.computed < s.known()) continue;  // a prompt chunk that is not the last
    ++s.generated;
    if (s.first_token_s < 0) s.first_token_s = now;
    else itl_s_.push_back(static_cast<float>(now - s.last_token_s));
    s.last_token_s = now;
    if (s.finished()) {
      pool_.free_request(s.cache_id);
      s.cache_id = -1;
      s.finish_s = now;
      ++num_finished_;
      any_finished = true;
    }
  }
  if (any_finished) {
    std::erase_if(running_, [&](int idx) { return seqs_[static_cast<size_t>(idx)].finished(); });
  }
}

void Scheduler::check_drained() const {
  for (const Sequence& s : seqs_) {
    ATTNKIT_CHECK(s.finished() && s.finish_s >= 0, "replay: request ", s.request->id, " did not finish (",
                  s.generated, " of ", s.request->output_len, " tokens)");
  }
  ATTNKIT_CHECK(pool_.num_requests() == 0, "replay: the cache still holds ", pool_.num_requests(),
                " requests after every request finished");
  ATTNKIT_CHECK(pool_.pages_in_use() == 0, "replay: ", pool_.pages_in_use(),
                " KV pages leaked: allocated after every request finished");
}

}  // namespace attnkit::serving
