// attnkit: list the backends, check them against the reference, benchmark, tune, replay traces
// and report. Each subcommand lives in its own file and registers itself through commands.h.
#include <iostream>
#include <map>

#include "attnkit/error.h"
#include "commands.h"

int main(int argc, char** argv) {
  namespace tool = attnkit::tool;
  CLI::App app{"attnkit: the attention-backend layer of an LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnkit 0.1.0");
  std::map<const CLI::App*, std::function<int()>> runners;
  for (auto add : {tool::add_list, tool::add_check, tool::add_bench, tool::add_tune, tool::add_replay, tool::add_report}) {
    std::function<int()> run = add(app);
    runners[app.get_subcommands([](CLI::App*) { return true; }).back()] = std::move(run);
  }
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
    return runners.at(app.get_subcommands().front())();
  } catch (const attnkit::Error& e) {
    std::cerr << "attnkit: error: " << e.what() << '\n';
    return 1;
  }
}
