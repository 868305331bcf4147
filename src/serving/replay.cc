// run_replay: the step loop. Schedule at the virtual clock, plan once, run every layer, advance the
// clock by the step's wall time, record; every so often check the step against `reference`.
#include "serving/replay.h"

#include <chrono>
#include <cstdio>
#include <set>

#include "attnkit/registry.h"
#include "serving/cp_attention.h"
#include "serving/page_pool.h"
#include "serving/step_runner.h"
#include "serving/verify.h"

namespace attnkit::serving {

namespace {

using Clock = std::chrono::steady_clock;

// 1.5 * 2^30 -> "1.5 GiB", 4096 -> "4 KiB": memory in the unit that suits it, in plain digits.
std::string bytes_text(double bytes) {
  static const char* const kUnit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (bytes >= 1024.0 && i < 4) {
    bytes /= 1024.0;
    ++i;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.4g %s", bytes, kUnit[i]);
  return text;
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// Empty when `caps` can run every layer of the model on a cache of `cfg` with q in `dtype`.
std::string why_not(const Capabilities& caps, const ModelSpec& model, const KvCacheConfig& cfg, DType dtype) {
  for (const AttentionSpec& spec : model.layers) {
    const std::string why = why_unsupported(caps, spec, cfg, nullptr, dtype);
    if (!why.empty()) return why;
  }
  return {};
}

}  // namespace

double default_kv_memory_bytes(Device device) {
  return device == Device::cuda ? 24.0 * (1ull << 30) : 1.0 * (1ull << 30);
}

ReplayResult run_replay(const Trace& trace, const ReplayOptions& o, ReplayResult* failed) {
  ReplayResult r;
  const bool hybrid = !o.prefill_backend.empty() && !o.decode_backend.empty();
  ATTNKIT_CHECK(hybrid || (o.prefill_backend.empty() && o.decode_backend.empty()),
                "replay: a hybrid pair needs both a prefill and a decode backend");
  const ModelSpec& model = o.model;
  const AttentionSpec& spec0 = model.layer(0);
  r.model = model.name;
  r.num_layers = model.num_layers();

  // The backend(s), their device and what they support.
  const Registry& registry = Registry::global();
  std::vector<std::string> names = hybrid ? std::vector<std::string>{o.prefill_backend, o.decode_backend}
                                          : std::vector<std::string>{o.backend};
  KvCacheConfig cfg = KvCacheConfig::for_spec(spec0, model.num_layers());
  cfg.page_size = o.page_size;
  cfg.dtype = o.kv_dtype;
  cfg.latent_format = o.latent_format;
  if (!hybrid && o.backend == "auto") {
    cfg.device = cuda_available() ? Device::cuda : Device::cpu;
    names[0] = select_backend(spec0, cfg).backend;
    r.label = "auto (" + names[0] + ")";
  }
  for (const std::string& name : names) {
    const BackendInfo& info = registry.get(name);
    if (info.why_unavailable && r.skipped.empty()) r.skipped = info.why_unavailable();
  }
  if (r.label.empty()) r.label = hybrid ? o.prefill_backend + "+" + o.decode_backend : o.backend;
  r.prefill_backend = names.front();
  r.decode_backend = names.back();
  if (!r.skipped.empty()) return r;
  const Capabilities caps = registry.get(names.front()).capabilities();
  cfg.device = caps.device;
  r.device = std::string(device_name(cfg.device));
  for (const std::string& name : names) {
    if (r.skipped.empty()) r.skipped = why_not(registry.get(name).capabilities(), model, cfg, o.dtype);
  }
  if (hybrid && r.skipped.empty() && registry.get(names.back()).capabilities().device != cfg.device) {
    r.skipped = "the prefill and decode backends run on different devices";
  }
  ATTNKIT_CHECK(o.cp_ranks >= 1, "replay: cp_ranks must be >= 1, got ", o.cp_ranks);
  const bool cp = o.cp_ranks > 1;
  ATTNKIT_CHECK(!cp || !hybrid, "replay --cp: each rank runs one backend; a prefill/decode pair is not served");
  if (cp && r.skipped.empty()) r.skipped = ContextParallelAttention::why_not(names[0]);
  if (!r.skipped.empty()) return r;
  r.cp_ranks = o.cp_ranks;
  if (cp) r.label += " (cp " + std::to_string(o.cp_ranks) + ")";

  const double page_bytes =
      static_cast<double>(cfg.k_slot_bytes() + cfg.v_slot_bytes()) * cfg.page_size * cfg.num_layers;
  // Under --cp the memory is a rank's; the default is shared by the ranks of one device.
  const double kv_memory = o.kv_memory_bytes > 0 ? o.kv_memory_bytes : default_kv_memory_bytes(cfg.device) / o.cp_ranks;
  ATTNKIT_CHECK(o.kv_pages == 0 || o.kv_pages >= 2, "replay: kv_pages must be >= 2 (or 0: from the KV memory), got ",
                o.kv_pages);
  cfg.num_pages = static_cast<int>(o.kv_pages > 0 ? o.kv_pages : static_cast<int64_t>(kv_memory / page_bytes));
  if (o.kv_pages == 0 && cfg.num_pages < 2) {
    throw Error(detail::concat(
        "replay: kv_memory_bytes of ", bytes_text(kv_memory),
        o.kv_memory_bytes > 0 ? "" : cfg.device == Device::cuda ? " (the GPU default)" : " (the CPU default)", " holds ",
        cfg.num_pages, cfg.num_pages == 1 ? " page" : " pages", " of ", bytes_text(page_bytes),
        "; expected room for at least 2 pages: more KV memory, or fewer layers"));
  }
  r.kv_pages = cfg.num_pages;
  r.page_size = cfg.page_size;
  r.page_bytes = page_bytes;
  r.kv_capacity_bytes = page_bytes * cfg.num_pages;

  // One cache, or one a rank; the pool the scheduler takes pages from; what runs each layer.
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<KvCache*> cache_ptrs;
  for (int rank = 0; rank < o.cp_ranks; ++rank) {
    caches.push_back(std::make_unique<KvCache>(cfg));
    cache_ptrs.push_back(caches.back().get());
  }
  std::unique_ptr<AttentionBackend> backend;
  std::unique_ptr<PagePool> pool;
  std::unique_ptr<LayerAttention> attention;
  SchedulerConfig sched = o.scheduler;
  if (!cp) {
    const BackendContext ctx{&model, caches[0].get()};
    backend = hybrid ? create_hybrid_backend(o.prefill_backend, o.decode_backend, ctx) : create_backend(names[0], ctx);
    pool = std::make_unique<CachePagePool>(*caches[0]);
    attention = std::make_unique<BackendAttention>(*backend);
  } else {
    const ShareLayout layout{.kind = o.cp_share, .num_ranks = o.cp_ranks, .pages_per_run = o.cp_pages_per_run,
                             .rank_num_pages = cfg.num_pages};
    pool = std::make_unique<ShardedPagePool>(cache_ptrs, layout);
    attention = std::make_unique<ContextParallelAttention>(model, names[0], cache_ptrs, layout);
    sched.chunked_prefill = false;  // context-parallel prefill takes whole prompts
  }
  Scheduler scheduler(trace, *pool, sched);
  const int max_tokens = static_cast<int>(o.scheduler.token_budget);
  StepRunner runner(model, *attention, cfg.device, o.dtype, max_tokens,
                    o.gemms && cfg.device == Device::cuda && !cp, o.seed);
  r.gemms = runner.gemms();
  r.weight_bytes = static_cast<double>(runner.weight_bytes());
  std::unique_ptr<StepVerifier> verifier;
  // The reference checked against itself proves nothing and doubles its (slow) run, unless the
  // ranks of a group are what is checked.
  const bool is_reference = !cp && names.front() == "reference" && names.back() == "reference";
  if (o.verify && !is_reference) {
    verifier = std::make_unique<StepVerifier>(std::vector<const KvCache*>(cache_ptrs.begin(), cache_ptrs.end()),
                                              o.dtype);
  }
  std::set<ForwardMode> modes_checked;

  const auto wall0 = Clock::now();
  double now = 0.0;
  int64_t step_idx = 0;
  while (!scheduler.done()) {
    const auto t0 = Clock::now();
    std::optional<ScheduledStep> st = scheduler.schedule(now);
    if (!st) {  // idle: jump the clock to the next arrival
      now = std::max(now, scheduler.next_arrival_s());
      continue;
    }
    attention->plan(st->batch);
    StepRecord rec;
    rec.sched_ms = static_cast<float>(ms_since(t0));
    const ForwardMode mode = st->batch.mode;
    const bool check = verifier && static_cast<int>(r.verified.size()) < o.verify_max &&
                       (!modes_checked.count(mode) || step_idx % o.verify_every == 0);
    const int check_layer = check ? static_cast<int>(r.verified.size() % static_cast<size_t>(model.num_layers())) : -1;
    runner.run(st->batch, step_idx, check_layer, rec);
    rec.step_ms = static_cast<float>(ms_since(t0));
    now += rec.step_ms * 1e-3;
    rec.batch_size = st->batch.batch_size();
    rec.num_tokens = st->batch.num_tokens();
    rec.num_decode = st->num_decode;
    rec.num_prefill = st->num_prefill;
    rec.kv_tokens = st->batch.total_kv_len();
    rec.max_kv_len = st->batch.max_kv_len();
    r.peak_workspace_bytes = std::max(r.peak_workspace_bytes, static_cast<double>(attention->workspace_bytes()));

    if (check) {  // outside the timed part: the clock has already moved on
      modes_checked.insert(mode);
      const int n = rec.num_tokens;
      const VerifyOutcome v =
          verifier->check(st->batch, model.layer(check_layer), check_layer, runner.q_host(step_idx, check_layer, n),
                          runner.k_host(step_idx, check_layer, n), runner.v_host(step_idx, check_layer, n),
                          runner.check_out(n));
      r.verified.push_back({.step = step_idx, .layer = check_layer, .mode = std::string(forward_mode_name(mode)),
                            .batch_size = rec.batch_size, .rel_err = v.rel_err, .tolerance = v.tolerance,
                            .passed = v.passed, .message = v.message});
      if (!v.passed) {
        if (failed) *failed = r;
        throw Error(detail::concat("replay --verify: ", r.label, " differs from reference at step ", step_idx, " (",
                                   forward_mode_name(mode), ", batch ", rec.batch_size, "): ", v.message));
      }
    }
    // Tokens are out when the device is done; the bookkeeping after that (finished requests freed)
    // is scheduler time too, and delays the next step.
    const auto t_complete = Clock::now();
    scheduler.complete(*st, now);
    const double complete_ms = ms_since(t_complete);
    rec.sched_ms += static_cast<float>(complete_ms);
    rec.step_ms += static_cast<float>(complete_ms);
    now += complete_ms * 1e-3;
    r.steps.push_back(rec);
    ++step_idx;
    if (o.on_step) o.on_step(scheduler.num_finished(), static_cast<int64_t>(trace.requests.size()), step_idx, now);
  }
  scheduler.check_drained();  // every request finished, no page left allocated
  r.wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();

  for (const Sequence& s : scheduler.sequences()) {
    const TraceRequest& q = *s.request;
    const double tpot = q.output_len > 1 ? (s.finish_s - s.first_token_s) / static_cast<double>(q.output_len - 1) : 0.0;
    r.requests.push_back({.arrival_s = q.arrival_s, .ttft_s = s.first_token_s - q.arrival_s,
                          .queue_s = s.admitted_s - q.arrival_s, .tpot_s = tpot,
                          .e2e_s = s.finish_s - q.arrival_s, .prompt_len = q.prompt_len, .output_len = q.output_len,
                          .num_preemptions = s.num_preemptions});
  }
  r.itl_s = scheduler.inter_token_s();
  r.num_preemptions = scheduler.num_preemptions();
  r.peak_pages = scheduler.peak_pages();
  if (const auto* sharded = dynamic_cast<const ShardedPagePool*>(pool.get())) {
    for (const int pages : sharded->peak_pages_per_rank()) r.rank_peak_kv_bytes.push_back(pages * page_bytes);
  }
  r.summary = summarize(r.steps, r.requests, r.itl_s, r.peak_pages * page_bytes, r.peak_workspace_bytes);
  return r;
}

}  // namespace attnkit::serving
