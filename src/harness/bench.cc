// run_bench: plan once, warm up, then time repeated forward calls on rotating fresh inputs.
#include "harness/bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>

#include "attnkit/batch.h"
#include "attnkit/latent_fp8.h"
#include "attnkit/registry.h"
#include "harness/decode_timeline.h"
#include "harness/device_copy.h"
#ifdef ATTNKIT_WITH_CUDA
#include "cuda/memory.h"
#include "cuda/timer.h"
#endif

namespace attnkit::harness {

namespace {

std::string phase_name(Phase p) { return p == Phase::prefill ? "prefill" : p == Phase::decode ? "decode" : "mixed"; }

// Visible keys of query j of a request (prefix p, n new tokens) under the spec's causal/window rule.
int64_t visible_keys(const AttentionSpec& s, int64_t prefix, int64_t n, int64_t j) {
  const int64_t pos = prefix + j;
  int64_t hi = s.causal ? pos : prefix + n - 1;
  int64_t lo = s.window_left >= 0 ? std::max<int64_t>(0, pos - s.window_left) : 0;
  return std::max<int64_t>(0, hi - lo + 1);
}

// Decode steps planned after the timed calls (BenchResult::plan_step_us).
constexpr int kPlanSteps = 21;

bool is_decode(const Workload& w) {
  return std::all_of(w.requests.begin(), w.requests.end(), [](const auto& r) { return r.second == 1; });
}

KvCacheConfig cache_for(const Workload& w, Device device) {
  KvCacheConfig cfg = KvCacheConfig::for_spec(w.model.layer(0));
  cfg.page_size = w.page_size;
  cfg.dtype = w.kv_dtype;
  cfg.latent_format = w.latent_format;
  cfg.device = device;
  int64_t pages = 0;
  for (const auto& [p, n] : w.requests) pages += (p + n + w.page_size - 1) / w.page_size;
  // A decode batch's requests also grow by kPlanSteps tokens each.
  if (is_decode(w)) pages += static_cast<int64_t>(w.requests.size()) * (kPlanSteps / w.page_size + 1);
  cfg.num_pages = static_cast<int>(pages);
  return cfg;
}

// Fills a whole pool with random values: one 16 MiB random block, copied over and over (repeating
// values are fine for timing; zeros are not, they can run faster than real data).
// `host` repeated over the pool's `nbytes` (the last copy cut short).
void fill_repeated(void* pool, size_t nbytes, const std::vector<uint8_t>& host, Device device) {
  for (size_t off = 0; off < nbytes; off += host.size()) {
    const size_t len = std::min(host.size(), nbytes - off);
    char* dst = static_cast<char*>(pool) + off;
    if (device == Device::cpu) {
      std::copy(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(len), dst);
    } else {
#ifdef ATTNKIT_WITH_CUDA
      cuda::copy_host_to_device(dst, host.data(), len);
#endif
    }
  }
}

void fill_pool(void* pool, size_t nbytes, DType dtype, Device device, uint64_t seed) {
  constexpr size_t kBlock = size_t{16} << 20;
  const size_t block = std::min(kBlock, nbytes);
  std::vector<uint8_t> host(block);
  fill_uniform(TensorView(host.data(), dtype, Device::cpu, {static_cast<int64_t>(block / dtype_size(dtype))}), seed,
               -1.0f, 1.0f);
  fill_repeated(pool, nbytes, host, device);
}

// fp8_blocked latent slots hold scales beside the values: slots encoded from random values, a
// block of them repeated over the pool.
void fill_latent_pool(void* pool, const KvCacheConfig& cfg, uint64_t seed) {
  const size_t slot = cfg.k_slot_bytes();
  const size_t slots = std::min<size_t>(static_cast<size_t>(cfg.num_slots()), (size_t{16} << 20) / slot);
  std::vector<float> values(static_cast<size_t>(cfg.head_dim_k));
  std::vector<uint8_t> host(slots * slot);
  for (size_t i = 0; i < slots; ++i) {
    fill_uniform(TensorView(values.data(), DType::f32, Device::cpu, {cfg.head_dim_k}), seed + i, -1.0f, 1.0f);
    encode_fp8_blocked_latent(values.data(), cfg.head_dim_k, cfg.head_dim_v, host.data() + i * slot);
  }
  fill_repeated(pool, static_cast<size_t>(cfg.num_slots()) * slot, host, cfg.device);
}

double current_rss_bytes() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// The median of `values` (sorted in place).
double median_of(std::vector<double>& values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The median host time of `fn(i)` over `n` calls, in microseconds.
template <typename Fn>
double median_host_us(int n, Fn&& fn) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(i);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return median_of(us);
}

}  // namespace

Workload make_workload(const ModelSpec& model, Phase phase, int batch_size, int64_t kv_len, int page_size, DType dtype) {
  Workload w;
  w.phase = phase;
  w.model = model;
  w.model.layers.resize(1);
  w.q_dtype = dtype;
  w.kv_dtype = dtype;
  w.page_size = page_size;
  for (int i = 0; i < batch_size; ++i) {
    if (phase == Phase::prefill) w.requests.emplace_back(0, kv_len);
    else if (phase == Phase::decode) w.requests.emplace_back(kv_len - 1, 1);
    else w.requests.emplace_back(i % 2 == 0 ? kv_len - 1 : kv_len / 2, i % 2 == 0 ? 1 : kv_len / 2);
  }
  w.label = phase_name(phase) + " " + std::to_string(batch_size) + " x " + std::to_string(kv_len);
  return w;
}

Workload make_workload(const ModelSpec& model, Phase phase, const std::string& requests, int page_size, DType dtype) {
  Workload w = make_workload(model, phase, 0, 1, page_size, dtype);
  std::stringstream items(requests);
  std::string item;
  while (std::getline(items, item, ',')) {
    long long prefix = 0, n = 0, count = 1;
    char plus = 0, x = 0;
    std::stringstream is(item);
    const bool ok = (is >> prefix >> plus >> n) && plus == '+' && (is.eof() || ((is >> x >> count) && x == 'x' && is.eof()));
    ATTNKIT_CHECK(ok && prefix >= 0 && n >= 0 && count >= 1 && prefix + n >= 1,
                  "requests: each item must be PREFIX+NEW or PREFIX+NEWxCOUNT with PREFIX >= 0, NEW >= 0, "
                  "PREFIX+NEW >= 1 and COUNT >= 1, got '", item, "'");
    for (long long c = 0; c < count; ++c) w.requests.emplace_back(prefix, n);
  }
  ATTNKIT_CHECK(!w.requests.empty(), "requests: at least one PREFIX+NEW item is needed, got '", requests, "'");
  w.label = phase_name(phase) + " requests " + requests;
  return w;
}

double workload_flops(const Workload& w) {
  const AttentionSpec& s = w.model.layer(0);
  double pairs = 0.0;
  for (const auto& [p, n] : w.requests) {
    for (int64_t j = 0; j < n; ++j) pairs += static_cast<double>(visible_keys(s, p, n, j));
  }
  return pairs * s.num_qo_heads * 2.0 * (s.head_dim_qk + s.head_dim_vo);
}

double workload_bytes(const Workload& w) {
  const AttentionSpec& s = w.model.layer(0);
  const double kv_row = static_cast<double>(s.num_kv_heads) * (s.head_dim_qk + (s.is_mla() ? 0 : s.head_dim_vo));
  double kv_tokens = 0.0, new_tokens = 0.0;
  for (const auto& [p, n] : w.requests) {
    kv_tokens += static_cast<double>(p + n);
    new_tokens += static_cast<double>(n);
  }
  const double q_row = static_cast<double>(s.num_qo_heads) * (s.head_dim_qk + s.head_dim_vo);  // q in, out back
  const double kv_bytes = w.latent_format == LatentFormat::fp8_blocked
                              ? static_cast<double>(cache_for(w, Device::cpu).k_slot_bytes())
                              : kv_row * dtype_size(w.kv_dtype);
  return kv_tokens * kv_bytes + new_tokens * (q_row + kv_row) * dtype_size(w.q_dtype);
}

BenchResult run_bench(const std::string& backend, const Workload& w, const BenchOptions& opt) {
  BenchResult r;
  r.backend = backend;
  r.workload = w.label;
  r.batch_size = static_cast<int>(w.requests.size());
  for (const auto& [p, n] : w.requests) r.kv_tokens += static_cast<double>(p + n);
  const BackendInfo& info = Registry::global().get(backend);
  if (info.why_unavailable) r.skipped = info.why_unavailable();
  if (!r.skipped.empty()) return r;
  const Capabilities caps = info.capabilities();
  const KvCacheConfig cfg = cache_for(w, caps.device);
  const AttentionSpec& s = w.model.layer(0);
  r.skipped = why_unsupported(caps, s, cfg, nullptr, w.q_dtype);
  if (!r.skipped.empty()) return r;

  KvCache cache(cfg);
  // Pages in shuffled order, as the peers' pools have them (bench/peers): a page table in order
  // would time a layout that serving rarely has.
  cache.allocator().shuffle(1);
  std::vector<RequestStep> steps;
  for (const auto& [p, n] : w.requests) steps.push_back({.id = -1, .prefix_len = p, .num_new_tokens = n, .custom_mask = {}});
  const ForwardBatch batch = build_batch(cache, steps);
  r.skipped = why_unsupported(caps, s, cfg, &batch, w.q_dtype);
  if (!r.skipped.empty()) return r;
  const size_t pool_bytes = static_cast<size_t>(cfg.num_slots());
  if (cfg.latent_format == LatentFormat::fp8_blocked) {
    fill_latent_pool(cache.k_pool(0), cfg, 1);
  } else {
    fill_pool(cache.k_pool(0), pool_bytes * cfg.k_slot_bytes(), cfg.dtype, cfg.device, 1);
  }
  if (!cfg.mla) fill_pool(cache.v_pool(0), pool_bytes * cfg.v_slot_bytes(), cfg.dtype, cfg.device, 2);

  const int64_t n = batch.num_tokens();
  std::vector<Staged> q, k, v, out;
  for (int i = 0; i < opt.input_sets; ++i) {
    q.emplace_back(caps.device, w.q_dtype, std::vector<int64_t>{n, s.num_qo_heads, s.head_dim_qk});
    k.emplace_back(caps.device, w.q_dtype, std::vector<int64_t>{n, s.num_kv_heads, s.head_dim_qk});
    v.emplace_back(caps.device, w.q_dtype, std::vector<int64_t>{n, s.num_kv_heads, s.head_dim_vo});
    out.emplace_back(caps.device, w.q_dtype, std::vector<int64_t>{n, s.num_qo_heads, s.head_dim_vo});
    for (Staged* t : {&q.back(), &k.back(), &v.back()}) {
      fill_uniform(t->host(), static_cast<uint64_t>(i) * 3 + 11, -1.0f, 1.0f);
      t->upload();
    }
  }
  // Host memory the backend itself adds: resident set before it exists and after its warm-up.
  const double rss_before = current_rss_bytes();
  BackendContext context{&w.model, &cache, opt.backend_options};
  std::unique_ptr<DecodeTimeline> timeline;
  if (!opt.decode_timeline.empty() && caps.device == Device::cuda) {
    timeline = std::make_unique<DecodeTimeline>();
    context.options.decode_timeline = timeline->records();
  }
  auto b = create_backend(backend, context);
  b->init_forward_metadata(batch);
  auto call = [&](int i) {
    const size_t set = static_cast<size_t>(i % opt.input_sets);
    b->forward(0, q[set].dev(), k[set].dev(), s.is_mla() ? TensorView() : v[set].dev(), out[set].dev());
  };
  using Clock = std::chrono::steady_clock;
  // The first call alone: where a backend compiles or tunes on first use (jit), this is its cold
  // (or cache-hit) cost; the time budget and the pacing start after it.
  const auto first_start = Clock::now();
  call(0);
  b->synchronize();
  r.first_call_ms = std::chrono::duration<double, std::milli>(Clock::now() - first_start).count();
  const auto budget_end = Clock::now() + std::chrono::duration<double>(opt.max_seconds);
  const auto warm_start = Clock::now();
  int warm_calls = 0;
  for (; warm_calls < opt.warmup && Clock::now() < budget_end; ++warm_calls) call(warm_calls + 1);
  b->synchronize();
  [[maybe_unused]] const double warm_s = std::chrono::duration<double>(Clock::now() - warm_start).count();  // paces the GPU calls
  r.backend_host_bytes = std::max(0.0, current_rss_bytes() - rss_before);
  std::vector<double> ms;
  if (caps.device == Device::cuda) {
#ifdef ATTNKIT_WITH_CUDA
    // The calls are queued without waiting, each after an L2 flush and between its own events, so
    // the GPU never idles on the host's launch work inside a timed region (as in a model, where
    // the launches run ahead of the GPU) and each call reads its KV from HBM. As many calls as the
    // warm-up's pace fits in the time budget.
    const double per_call_s = warm_calls > 0 ? warm_s / warm_calls : 0.0;
    const double left_s = std::chrono::duration<double>(budget_end - Clock::now()).count();
    const int repeats = per_call_s > 0.0 ? std::clamp(static_cast<int>(left_s / per_call_s), 1, opt.repeats) : opt.repeats;
    std::vector<std::unique_ptr<cuda::EventTimer>> timers;
    for (int i = 0; i < repeats; ++i) {
      cuda::flush_l2();
      timers.push_back(std::make_unique<cuda::EventTimer>());
      timers.back()->start();
      call(i);
      timers.back()->stop();
    }
    for (auto& t : timers) ms.push_back(t->elapsed_ms());
#endif
  } else {
    for (int i = 0; i < opt.repeats; ++i) {
      if (i > 0 && Clock::now() > budget_end) break;  // slow backends (reference) stop early
      if (opt.before_each_call) r.paired.push_back(opt.before_each_call());
      const auto t0 = Clock::now();
      call(i);
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  if (timeline) {
    b->synchronize();
    timeline->write_csv(opt.decode_timeline);
  }
  if (caps.device == Device::cuda) {
    r.call_host_us = median_host_us(21, [&](int i) { call(i); });
    b->synchronize();
  }
  r.call_ms = ms;
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  r.min_ms = ms.front();
  r.max_ms = ms.back();
  r.repeats = static_cast<int>(ms.size());
  r.flops = workload_flops(w);
  r.bytes = workload_bytes(w);
  const double seconds = r.median_ms * 1e-3;
  r.tokens_per_s = static_cast<double>(n) / seconds;
  r.flop_per_s = r.flops / seconds;
  r.bytes_per_s = r.bytes / seconds;
  r.peak_rss_bytes = peak_rss_bytes();
  r.workspace_bytes = static_cast<double>(b->workspace_bytes());
  // Host cost of planning one batch (the plan is reused by every layer), median of a few.
  r.plan_us = median_host_us(21, [&](int) { b->init_forward_metadata(batch); });
  // And the plans of the next decode steps, each history one position longer than in the step
  // before (a serving loop's usual plan, which a backend may derive from the last one). Each
  // batch is built just before its plan, untimed, as a serving loop builds it.
  if (is_decode(w)) {
    std::vector<RequestStep> grow;
    for (RequestId id : batch.request_ids) grow.push_back({.id = id, .prefix_len = 0, .num_new_tokens = 1, .custom_mask = {}});
    ForwardBatch next[2];  // the backend keeps the last planned one: built in turn
    std::vector<double> step_us;
    for (int i = 0; i < kPlanSteps; ++i) {
      ForwardBatch& nb = next[i % 2];
      nb = build_batch(cache, grow);
      const auto t0 = Clock::now();
      b->init_forward_metadata(nb);
      step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    b->synchronize();
    r.plan_step_us = median_of(step_us);
  }
  return r;
}

}  // namespace attnkit::harness
