// `attnkit jit --show`: the CUDA source the `jit` backend compiles for a layer of a preset, with
// the model edits (--heads, --score-mod, --mask-mod) applied: what runs, to read. Needs no GPU.
#include <iostream>

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
  return [o] {
    const ModelSpec model = with_edits(make_preset(o->preset), o->edits);
    const AttentionSpec& spec = model.layer(o->layer);
    KvCacheConfig cache = KvCacheConfig::for_spec(spec, model.num_layers());
    cache.page_size = o->page_size;
    cache.dtype = parse_dtype(o->kv_dtype);
    cache.device = Device::cuda;
    std::cout << jit_kernel_source(spec, cache, parse_dtype(o->dtype));
    return 0;
  };
}

}  // namespace attnkit::tool
