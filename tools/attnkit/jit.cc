// `attnkit jit --show`: the CUDA source the `jit` backend compiles for a layer of a preset, with
// the model edits (--heads, --score-mod, --mask-mod) applied: what runs, to read. Needs no GPU.
// `attnkit warmup`: every kernel a preset needs, compiled into the disk cache ahead of serving
// (for the current GPU, or for --arch without one), and with --tune the tile choices of typical
// batch shapes measured on this GPU and kept on disk beside them.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

#include "attnkit/error.h"
#include "attnkit/jit.h"
#include "attnkit/registry.h"
#include "commands.h"
#include "harness/bench.h"
#include "options.h"

namespace attnkit::tool {

std::function<int()> add_jit(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("jit", "Show the source the jit backend compiles for a layer");
  struct Options {
    std::string preset = "llama3-8b";
    ModelEdits edits;
    int layer = 0;
    int page_size = 16;
    std::string dtype = "bf16";
    std::string kv_dtype = "bf16";
    std::string tile;
    bool show = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_flag("--show", o->show, "Print the rendered kernel source")->required();
  cmd->add_option("--preset", o->preset, "Model preset")->check(CLI::IsMember(preset_names()));
  add_model_options(*cmd, &o->edits);
  cmd->add_option("--layer", o->layer, "Layer of the preset")->check(whole_number(0, 1 << 20));
  cmd->add_option("--page-size", o->page_size, "Tokens a page")->check(whole_number(1, 256));
  cmd->add_option("--dtype", o->dtype, "q and out dtype")->check(CLI::IsMember({"bf16", "f16"}));
  cmd->add_option("--kv-dtype", o->kv_dtype, "Cache dtype")->check(CLI::IsMember({"bf16", "f16"}));
  cmd->add_option("--tile", o->tile, "The tensor-core template's tile, e.g. 'n32 w4x1 m2 s3' (default: the first tuned)");
  return [o] {
    const ModelSpec model = with_edits(make_preset(o->preset), o->edits);
    const AttentionSpec& spec = model.layer(o->layer);
    KvCacheConfig cache = KvCacheConfig::for_spec(spec, model.num_layers());
    cache.page_size = o->page_size;
    cache.dtype = parse_dtype(o->kv_dtype);
    cache.device = Device::cuda;
    std::cout << jit_kernel_source(spec, cache, parse_dtype(o->dtype), o->tile);
    return 0;
  };
}

namespace {

// One call of the jit backend on each typical batch shape, for each distinct layer (by its rendered
// kernel) and page size: the backend tunes a shape bucket on its first call there and keeps the
// choice on disk. Returns the shapes run.
int tune_typical_shapes(const ModelSpec& model, const std::vector<int>& page_sizes, DType dtype, DType kv_dtype) {
  struct Shape {
    harness::Phase phase;
    int batch;
    int64_t kv_len;
  };
  std::vector<Shape> shapes;
  for (int b : {1, 8, 64})
    for (int64_t kv : {1024, 4096, 16384}) shapes.push_back({harness::Phase::decode, b, kv});
  for (int64_t kv : {1024, 4096}) shapes.push_back({harness::Phase::decode, 256, kv});
  for (int64_t n : {512, 2048, 8192, 32768}) shapes.push_back({harness::Phase::prefill, 1, n});
  // Layers alike (the same kernel) tune alike: one layer of each.
  std::vector<ModelSpec> layers;
  std::set<std::string> seen;
  for (int l = 0; l < model.num_layers(); ++l) {
    KvCacheConfig cache = KvCacheConfig::for_spec(model.layer(l), 1);
    cache.dtype = kv_dtype;
    if (!seen.insert(jit_kernel_source(model.layer(l), cache, dtype)).second) continue;
    ModelSpec one = model;
    one.layers = {model.layer(l)};
    layers.push_back(std::move(one));
  }
  harness::BenchOptions opt;
  opt.warmup = 0;
  opt.repeats = 1;
  opt.input_sets = 1;
  opt.max_seconds = 0.0;
  const int total = static_cast<int>(layers.size() * page_sizes.size() * shapes.size());
  int done = 0;
  for (const ModelSpec& m : layers) {
    for (int page : page_sizes) {
      for (const Shape& sh : shapes) {
        harness::Workload w = harness::make_workload(m, sh.phase, sh.batch, sh.kv_len, page, dtype);
        w.kv_dtype = kv_dtype;
        const harness::BenchResult r = harness::run_bench("jit", w, opt);
        ++done;
        if (r.skipped.empty()) {
          std::printf("[tune %d/%d] %s, page %d: first call %.1f ms\n", done, total, w.label.c_str(), page, r.first_call_ms);
        } else {
          std::printf("[tune %d/%d] %s, page %d: skipped: %s\n", done, total, w.label.c_str(), page, r.skipped.c_str());
        }
        std::fflush(stdout);
      }
    }
  }
  return done;
}

}  // namespace

std::function<int()> add_warmup(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("warmup", "Compile the jit kernels a preset needs into the disk cache");
  struct Options {
    std::string preset = "llama3-8b";
    ModelEdits edits;
    std::vector<int> page_sizes = {16};
    std::string dtype = "bf16";
    std::string kv_dtype = "bf16";
    std::string arch;
    bool tune = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--preset", o->preset, "Model preset")->check(CLI::IsMember(preset_names()));
  add_model_options(*cmd, &o->edits);
  cmd->add_option("--page-sizes", o->page_sizes, "Page sizes the server uses, comma-separated")
      ->delimiter(',')
      ->check(whole_number(1, 256));
  cmd->add_option("--dtype", o->dtype, "q and out dtype")->check(CLI::IsMember({"bf16", "f16"}));
  cmd->add_option("--kv-dtype", o->kv_dtype, "Cache dtype")->check(CLI::IsMember({"bf16", "f16"}));
  cmd->add_option("--arch", o->arch, "GPU architecture to compile for, e.g. sm_90 (default: this machine's GPU)");
  cmd->add_flag("--tune", o->tune,
                "Also tune on this GPU: one call of each typical batch shape (decode: 1 to 256 requests of 1k to 16k "
                "tokens; prefill: one prompt of 512 to 32k tokens) for each distinct layer, so that the tile choices "
                "are on disk before the first request")
      ->excludes("--arch");
  return [o] {
    if (o->tune) {  // before compiling for "this machine's GPU", which a machine without one lacks too
      const std::string why = Registry::global().get("jit").why_unavailable();
      ATTNKIT_CHECK(why.empty(), "warmup --tune: tuning runs the kernels on this machine's GPU: ", why);
    }
    const ModelSpec model = with_edits(make_preset(o->preset), o->edits);
    const auto t0 = std::chrono::steady_clock::now();
    int compiled = 0, found = 0;
    for (size_t i = 0; i < o->page_sizes.size(); ++i) {
      KvCacheConfig cache = KvCacheConfig::for_spec(model.layer(0), model.num_layers());
      cache.page_size = o->page_sizes[i];
      cache.dtype = parse_dtype(o->kv_dtype);
      jit_warmup(model, cache, parse_dtype(o->dtype), o->arch, [&](const JitWarmup& w, int done, int total) {
        std::printf("[%d/%d] %s: %s %.1f ms\n", done, total, w.kernel.c_str(),
                    w.compiled ? "compiled in" : "on disk, checked in", w.ms);
        std::fflush(stdout);
        (w.compiled ? compiled : found) += 1;
      });
    }
    int tuned = 0;
    if (o->tune) tuned = tune_typical_shapes(model, o->page_sizes, parse_dtype(o->dtype), parse_dtype(o->kv_dtype));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d compiled, %d already on disk, %d batch shapes tuned, %.2f s; cache: %s\n", compiled, found, tuned, s,
                jit_cache_dir().c_str());
    return 0;
  };
}

}  // namespace attnkit::tool
