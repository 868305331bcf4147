// Context-parallel decode over the GPUs of one host: every request's KV history shared out over N
// GPUs (NCCL, a thread a GPU), one decode step timed layer by layer; and the same backend on one
// GPU over the largest share, the read rate the N-GPU step is judged against.
//
//   cp_decode_bench [--gpus N] [--requests LEN[xCOUNT],...] [--preset NAME] [--layers L]
//                   [--share interleaved|contiguous] [--page-size P] [--repeats R] [--backend B]
//
// Per run: ms a layer (the slowest rank's median over R timed steps, each step every layer's
// attend and merge), the KV bytes each GPU reads (its share), the read rate a GPU, and decode
// tokens/s (batch x 1 / (ms a layer x layers)). Values are zeros and the cache is left as
// allocated: the time, not the output, is measured (the tests check the output).
// The targets (docs/benchmarks.md): one 1M-token request on 8 GPUs, llama3-70b heads, layer time
// at most share bytes / (0.8 x one GPU's rate on a share); 16 x 256k on 2 GPUs at least 1.8x one
// GPU's tokens/s on the same batch.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attnkit/context_parallel.h"
#include "attnkit/error.h"
#include "attnkit/registry.h"
#include "core/device_memory.h"
#include "cuda/check.h"

namespace {

using namespace attnkit;

struct Options {
  int gpus = 2;
  std::string requests = "262144x16";
  std::string preset = "llama3-70b";
  int layers = 4;
  std::string share = "interleaved";
  int page_size = 16;
  int repeats = 10;
  std::string backend = "planned";
};

// "LEN[xCOUNT],..." -> one length a request.
std::vector<int64_t> parse_requests(const std::string& text) {
  std::vector<int64_t> lens;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t x = item.find('x');
    const int64_t len = std::stoll(item.substr(0, x));
    const int64_t count = x == std::string::npos ? 1 : std::stoll(item.substr(x + 1));
    ATTNKIT_CHECK(len >= 1 && count >= 1, "--requests: '", item, "' must be LEN or LENxCOUNT, both >= 1");
    lens.insert(lens.end(), static_cast<size_t>(count), len);
  }
  return lens;
}

struct RunResult {
  double ms_per_layer = 0.0;   // the slowest rank's median
  int64_t max_share_bytes = 0;  // K and V a GPU reads a layer, the largest share
};

// One decode step of `lens` over `gpus` GPUs, timed.
RunResult run(const Options& o, const std::vector<int64_t>& lens, int gpus) {
  const ModelSpec model = [&] {
    ModelSpec m = make_preset(o.preset, o.layers);
    for (AttentionSpec& s : m.layers) s = m.layer(0);  // one mechanism: its first layer's, every layer
    return m;
  }();
  const AttentionSpec& spec = model.layer(0);
  int64_t pages = 0;
  for (int64_t len : lens) pages += (len + o.page_size - 1) / o.page_size;
  ShareLayout layout;
  layout.kind = o.share == "contiguous" ? ShareKind::contiguous : ShareKind::interleaved;
  layout.num_ranks = gpus;
  layout.pages_per_run = 64;
  // A rank's pages: its even part of every request, a run (contiguous) or one page (interleaved)
  // more a request for the remainders.
  layout.rank_num_pages = static_cast<int>(pages / gpus + static_cast<int64_t>(lens.size()) * layout.pages_per_run + 1);

  KvCacheConfig cfg = KvCacheConfig::for_spec(spec, o.layers);
  cfg.page_size = o.page_size;
  cfg.dtype = DType::bf16;
  cfg.device = Device::cuda;
  cfg.num_pages = layout.rank_num_pages;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<PageAllocator*> allocators;
  for (int r = 0; r < gpus; ++r) {
    ATTNKIT_CUDA_CHECK(cudaSetDevice(r));
    caches.push_back(std::make_unique<KvCache>(cfg));
    allocators.push_back(&caches.back()->allocator());
  }
  ShardedPageTables tables(allocators, layout, o.page_size);
  std::vector<RequestStep> steps;
  for (int64_t len : lens) steps.push_back({.id = -1, .prefix_len = len - 1, .num_new_tokens = 1, .custom_mask = {}});
  const ForwardBatch global = tables.build_batch(steps);
  const int64_t n = global.batch_size();

  const NcclId id = make_nccl_id();
  std::vector<double> ms(static_cast<size_t>(gpus), 0.0);
  std::vector<int64_t> share_bytes(static_cast<size_t>(gpus), 0);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(gpus));
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      try {
        ATTNKIT_CUDA_CHECK(cudaSetDevice(r));
        const std::unique_ptr<Communicator> comm = make_nccl_communicator(r, gpus, id);
        const std::unique_ptr<AttentionBackend> backend =
            create_backend(o.backend, {&model, caches[static_cast<size_t>(r)].get()});
        ContextParallelDecode cp(*comm, *backend, layout);
        cp.plan(global);
        for (int i = 0; i < cp.share().batch.batch_size(); ++i)
          share_bytes[static_cast<size_t>(r)] += cp.share().batch.kv_len(i) * spec.num_kv_heads *
                                                 (spec.head_dim_qk + spec.head_dim_vo) * 2;
        const auto rows = [&](int heads, int dim) { return static_cast<size_t>(n * heads * dim) * 2; };
        Buffer q(Device::cuda, rows(spec.num_qo_heads, spec.head_dim_qk));
        Buffer k(Device::cuda, rows(spec.num_kv_heads, spec.head_dim_qk));
        Buffer v(Device::cuda, rows(spec.num_kv_heads, spec.head_dim_vo));
        Buffer out(Device::cuda, rows(spec.num_qo_heads, spec.head_dim_vo));
        for (Buffer* b : {&q, &k, &v}) cuda::device_memset(b->data(), 0, b->nbytes());
        const auto view = [&](const Buffer& b, int heads, int dim) { return b.view(DType::bf16, {n, heads, dim}); };
        const auto step = [&] {
          for (int l = 0; l < o.layers; ++l) {
            cp.attend(l, view(q, spec.num_qo_heads, spec.head_dim_qk), view(k, spec.num_kv_heads, spec.head_dim_qk),
                      view(v, spec.num_kv_heads, spec.head_dim_vo));
            cp.merge(view(out, spec.num_qo_heads, spec.head_dim_vo));
          }
        };
        for (int w = 0; w < 2; ++w) step();  // first calls: opt-ins, NCCL's own set-up
        cudaEvent_t begin = nullptr, end = nullptr;
        ATTNKIT_CUDA_CHECK(cudaEventCreate(&begin));
        ATTNKIT_CUDA_CHECK(cudaEventCreate(&end));
        std::vector<double> times;
        for (int i = 0; i < o.repeats; ++i) {
          ATTNKIT_CUDA_CHECK(cudaEventRecord(begin, cudaStreamPerThread));
          step();
          ATTNKIT_CUDA_CHECK(cudaEventRecord(end, cudaStreamPerThread));
          ATTNKIT_CUDA_CHECK(cudaEventSynchronize(end));
          float t = 0.0f;
          ATTNKIT_CUDA_CHECK(cudaEventElapsedTime(&t, begin, end));
          times.push_back(static_cast<double>(t) / o.layers);
        }
        std::nth_element(times.begin(), times.begin() + static_cast<ptrdiff_t>(times.size() / 2), times.end());
        ms[static_cast<size_t>(r)] = times[times.size() / 2];
        cudaEventDestroy(begin);
        cudaEventDestroy(end);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return {*std::max_element(ms.begin(), ms.end()), *std::max_element(share_bytes.begin(), share_bytes.end())};
}

void print(const char* what, int gpus, const RunResult& r, int64_t batch, int layers) {
  std::printf("%-28s gpus %d  %.3f ms a layer  share %.2f GB a layer  %.3f TB/s a GPU  %.1f tokens/s\n", what, gpus,
              r.ms_per_layer, static_cast<double>(r.max_share_bytes) / 1e9,
              static_cast<double>(r.max_share_bytes) / (r.ms_per_layer * 1e-3) / 1e12,
              static_cast<double>(batch) / (r.ms_per_layer * 1e-3 * layers));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Context-parallel decode over the GPUs of one host (NCCL), against one GPU over one share");
  app.add_option("--gpus", o.gpus, "GPUs, a rank each")->check(CLI::Range(1, 64));
  app.add_option("--requests", o.requests, "Histories: LEN[xCOUNT],...");
  app.add_option("--preset", o.preset, "Model preset (its first layer's heads, every layer)");
  app.add_option("--layers", o.layers, "Layers a step")->check(CLI::Range(1, 1000));
  app.add_option("--share", o.share, "How pages are shared out")->check(CLI::IsMember({"interleaved", "contiguous"}));
  app.add_option("--page-size", o.page_size, "KV page size")->check(CLI::Range(1, 256));
  app.add_option("--repeats", o.repeats, "Timed steps (the median is reported)")->check(CLI::Range(1, 10000));
  app.add_option("--backend", o.backend, "Each rank's backend (one that returns the LSE)");
  CLI11_PARSE(app, argc, argv);
  try {
    ATTNKIT_CHECK(nccl_available(), "cp_decode_bench: this attnkit has no NCCL, which the ranks gather through");
    int count = 0;
    ATTNKIT_CUDA_CHECK(cudaGetDeviceCount(&count));
    ATTNKIT_CHECK(o.gpus <= count, "--gpus ", o.gpus, ": this host has ", count, " GPU(s)");
    const std::vector<int64_t> lens = parse_requests(o.requests);
    const RunResult many = run(o, lens, o.gpus);
    print("context parallel", o.gpus, many, static_cast<int64_t>(lens.size()), o.layers);
    // One GPU over the largest share: each request's history cut to its share of the GPUs.
    std::vector<int64_t> share_lens;
    for (int64_t len : lens) share_lens.push_back((len + o.gpus - 1) / o.gpus);
    const RunResult one_share = run(o, share_lens, 1);
    print("one GPU, one share", 1, one_share, static_cast<int64_t>(lens.size()), o.layers);
    std::printf("share read rate: %.3f of one GPU's (target >= 0.8)\n",
                (static_cast<double>(many.max_share_bytes) / many.ms_per_layer) /
                    (static_cast<double>(one_share.max_share_bytes) / one_share.ms_per_layer));
    if (o.gpus > 1) {
      try {  // the whole batch on one GPU, where it fits
        const RunResult one = run(o, lens, 1);
        print("one GPU, whole batch", 1, one, static_cast<int64_t>(lens.size()), o.layers);
        std::printf("speed-up over one GPU: %.2fx (target for 2 GPUs >= 1.8)\n", one.ms_per_layer / many.ms_per_layer);
      } catch (const Error& e) {
        std::printf("one GPU, whole batch: %s\n", e.what());
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
