// `attnkit check`: random batches through each backend and through `reference`, every element compared.
#include <iomanip>
#include <iostream>

#include "attnkit/cpu_target.h"
#include "attnkit/registry.h"
#include "commands.h"
#include "format.h"
#include "harness/check.h"
#include "options.h"

namespace attnkit::tool {

namespace {
std::vector<std::string> backend_choices() {
  std::vector<std::string> names = Registry::global().names();
  names.push_back("all");
  return names;
}
}  // namespace

std::function<int()> add_check(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("check", "Compare backends with `reference` on random batches");
  struct Options {
    std::string backend = "all";
    std::string preset = "llama3-8b";
    int cases = 8;
    uint64_t seed = 1;
    bool standard = false;
    BackendOptions backend_options;
    ModelEdits edits;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--backend", o->backend, "Backend name, or all")->check(CLI::IsMember(backend_choices()));
  cmd->add_option("--preset", o->preset, "Model preset whose heads the random cases use")
      ->check(CLI::IsMember(preset_names()));
  cmd->add_option("--cases", o->cases, "Random cases per backend")->check(whole_number(1, 100000));
  cmd->add_option("--seed", o->seed, "Seed of the random cases")->check(unsigned_integer());
  cmd->add_flag("--standard", o->standard, "Also run the fixed conformance table");
  add_model_options(*cmd, &o->edits);
  add_threads_option(*cmd);
  add_cpu_target_option(*cmd);
  add_backend_options(*cmd, &o->backend_options);
  return [o] {
    const Registry& registry = Registry::global();
    std::vector<std::string> backends;
    if (o->backend == "all") {
      for (const auto& b : registry.all()) {
        if (b.name != "reference") backends.push_back(b.name);
      }
    } else {
      backends.push_back(o->backend);
    }
    const ModelSpec model = with_edits(make_preset(o->preset), o->edits);
    int passed = 0, failed = 0, skipped = 0;
    for (const std::string& name : backends) {
      const BackendInfo& info = registry.get(name);
      const std::string why = info.why_unavailable ? info.why_unavailable() : std::string();
      if (o->backend != "all") require_available("check", name);
      if (!why.empty()) {
        std::cout << name << ": skipped, not available here: " << why << '\n';
        ++skipped;
        continue;
      }
      if (info.device == Device::cpu && name == "cpu") std::cout << "cpu target: " << cpu_target() << '\n';
      std::vector<harness::CheckCase> cases = harness::random_cases(model, info.capabilities(), o->cases, o->seed);
      if (o->standard) {
        for (auto& c : harness::standard_cases()) cases.push_back(std::move(c));
      }
      for (const auto& c : cases) {
        const harness::CheckResult r = harness::run_check(name, c, o->backend_options);
        std::cout << name << "  " << harness::describe(c) << "  ";
        if (!r.skipped.empty()) {
          std::cout << "SKIP (" << r.skipped << ")\n";
          ++skipped;
          continue;
        }
        std::cout << std::scientific << std::setprecision(2) << "max abs " << r.max_abs_err << "  rel " << r.rel_err;
        if (r.lse_checked) std::cout << "  lse " << r.lse_max_abs_err;
        std::cout << " <= " << r.tolerance << std::defaultfloat << "  "
                  << (r.passed ? "PASS" : "FAIL") << '\n';
        if (!r.passed) std::cout << "    " << r.message << '\n';
        (r.passed ? passed : failed) += 1;
      }
    }
    std::cout << passed << " passed, " << failed << " failed";
    if (skipped) std::cout << ", " << skipped << " skipped";
    std::cout << '\n';
    return failed == 0 ? 0 : 1;
  };
}

}  // namespace attnkit::tool
