// `attnkit jit --show`: the CUDA source the `jit` backend compiles for a layer of a preset, with
// the model edits (--heads, --score-mod, --mask-mod) applied: what runs, to read. Needs no GPU.
// `attnkit warmup`: every kernel a preset needs, compiled into the disk cache ahead of serving
// (for the current GPU, or for --arch without one).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "attnkit/jit.h"
#include "commands.h"
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

std::function<int()> add_warmup(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("warmup", "Compile the jit kernels a preset needs into the disk cache");
  struct Options {
    std::string preset = "llama3-8b";
    ModelEdits edits;
    std::vector<int> page_sizes = {16};
    std::string dtype = "bf16";
    std::string kv_dtype = "bf16";
    std::string arch;
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
  return [o] {
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
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%d compiled, %d already on disk, %.2f s; cache: %s\n", compiled, found, s, jit_cache_dir().c_str());
    return 0;
  };
}

}  // namespace attnkit::tool
