// Percentiles and the summary of a replay; the records themselves are filled by replay.cc.
#include "serving/metrics.h"

#include <algorithm>
#include <cmath>

namespace attnkit::serving {

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p99 = at(0.99);
  double sum = 0.0;
  for (double x : v) sum += x;
  p.mean = sum / static_cast<double>(v.size());
  p.max = v.back();
  return p;
}

Summary summarize(const std::vector<StepRecord>& steps, const std::vector<RequestRecord>& requests,
                  const std::vector<float>& itl_s, double peak_kv_bytes, double peak_workspace_bytes) {
  Summary s;
  s.num_requests = static_cast<int64_t>(requests.size());
  s.num_steps = static_cast<int64_t>(steps.size());
  std::vector<double> ttft, tpot, e2e, queue, admitted_ttft;
  double last_finish = 0.0;
  for (const RequestRecord& r : requests) {
    s.output_tokens += r.output_len;
    s.prompt_tokens += r.prompt_len;
    ttft.push_back(r.ttft_s);
    queue.push_back(r.queue_s);
    admitted_ttft.push_back(r.ttft_s - r.queue_s);
    if (r.output_len > 1) tpot.push_back(r.tpot_s);
    e2e.push_back(r.e2e_s);
    last_finish = std::max(last_finish, r.arrival_s + r.e2e_s);
  }
  s.makespan_s = last_finish;
  if (s.makespan_s > 0) {
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.makespan_s;
    s.total_tokens_per_s = static_cast<double>(s.output_tokens + s.prompt_tokens) / s.makespan_s;
  }
  s.ttft_s = percentiles(std::move(ttft));
  s.queue_s = percentiles(std::move(queue));
  s.admitted_ttft_s = percentiles(std::move(admitted_ttft));
  s.tpot_s = percentiles(std::move(tpot));
  s.e2e_s = percentiles(std::move(e2e));
  s.itl_s = percentiles(std::vector<double>(itl_s.begin(), itl_s.end()));
  s.peak_kv_bytes = peak_kv_bytes;
  s.peak_workspace_bytes = peak_workspace_bytes;

  double step_ms = 0.0, attn_ms = 0.0, sched_ms = 0.0, large_step_ms = 0.0, large_sched_ms = 0.0;
  std::vector<double> sched_us;
  for (const StepRecord& st : steps) {
    step_ms += st.step_ms;
    attn_ms += st.attn_ms;
    sched_ms += st.sched_ms;
    sched_us.push_back(st.sched_ms * 1e3);
    s.max_batch_size = std::max(s.max_batch_size, st.batch_size);
    if (st.batch_size >= kLargeBatch) {
      ++s.large_steps;
      large_step_ms += st.step_ms;
      large_sched_ms += st.sched_ms;
    }
  }
  if (step_ms > 0) {
    s.attn_fraction = attn_ms / step_ms;
    s.sched_fraction = sched_ms / step_ms;
  }
  if (large_step_ms > 0) s.sched_fraction_large = large_sched_ms / large_step_ms;
  s.sched_us_p50 = percentiles(std::move(sched_us)).p50;
  return s;
}

}  // namespace attnkit::serving
