// attnkit: list the backends, check them against the reference, benchmark them.
#include <iostream>

#include "attnkit/error.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"attnkit: the attention-backend layer of an LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnkit 0.1.0");
  std::function<int()> run_list = attnkit::tool::add_list(app);
  std::function<int()> run_check = attnkit::tool::add_check(app);
  std::function<int()> run_bench = attnkit::tool::add_bench(app);
  std::function<int()> run_replay = attnkit::tool::add_replay(app);
  std::function<int()> run_report = attnkit::tool::add_report(app);
  std::function<int()> run_tune = attnkit::tool::add_tune(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line naming the flag or value; usage errors exit 2.
    std::cerr << "attnkit: " << e.what() << " (see --help)\n";
    return 2;
  }
  try {
    for (CLI::App* sub : app.get_subcommands()) {
      if (sub->get_name() == "list") return run_list();
      if (sub->get_name() == "check") return run_check();
      if (sub->get_name() == "bench") return run_bench();
      if (sub->get_name() == "replay") return run_replay();
      if (sub->get_name() == "report") return run_report();
      if (sub->get_name() == "tune") return run_tune();
    }
  } catch (const attnkit::Error& e) {
    std::cerr << "attnkit: error: " << e.what() << '\n';
    return 1;
  }
  return 2;
}
