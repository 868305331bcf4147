// attnkit: list the backends, check them against the reference, benchmark, tune, replay traces
// and report. Each subcommand lives in its own file and registers itself through commands.h.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <regex>

#include "attnkit/error.h"
#include "commands.h"
#include "options.h"

namespace {

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// A subcommand's long options, "--backend", ...
std::vector<std::string> option_names(const CLI::App& sub) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : sub.get_options()) {
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
  }
  return names;
}

// CLI11's message in the words of this tool: the unknown word named, the nearest known one offered.
std::string explain(const CLI::ParseError& e, const CLI::App& app) {
  namespace tool = attnkit::tool;
  const std::vector<std::string> subs = subcommand_names(app);
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  const std::vector<std::string> rest = app.remaining(true);
  if (chosen.empty()) {
    if (rest.empty()) return "a subcommand is required: " + join(subs);
    const std::string& word = rest.front();
    if (word.rfind('-', 0) == 0) {
      const std::string flag = word.substr(0, word.find('='));
      std::vector<std::string> owners;
      for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
        const std::vector<std::string> names = option_names(*sub);
        if (std::find(names.begin(), names.end(), flag) != names.end()) {
          owners.push_back(sub->get_name());
        }
      }
      if (!owners.empty()) {
        return flag + " is an option of " + join(owners) + ": it comes after the subcommand (attnkit " +
               owners.front() + " " + flag + " ...)";
      }
      const std::string near = tool::nearest(flag, {"--help", "--version"});
      return "unknown option '" + flag + "'" + (near.empty() ? "" : "; did you mean " + near + "?") +
             " (a subcommand comes first: " + join(subs) + ")";
    }
    const std::string near = tool::nearest(word, subs);
    return "unknown subcommand '" + word + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?") +
           " (subcommands: " + join(subs) + ")";
  }
  const CLI::App& sub = *chosen.front();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) && !rest.empty()) {
    const std::string word = rest.front().substr(0, rest.front().find('='));
    const std::vector<std::string> names = option_names(sub);
    if (std::find(names.begin(), names.end(), word) != names.end()) {  // given before the subcommand
      return word + " is an option of " + sub.get_name() + ": it comes after the subcommand (attnkit " +
             sub.get_name() + " " + word + " ...)";
    }
    const std::string near = word.rfind("--", 0) == 0 ? tool::nearest(word, names) : std::string();
    return (word.rfind('-', 0) == 0 ? "unknown option '" : "unexpected argument '") + word + "' of `" +
           sub.get_name() + "`" + (near.empty() ? "" : "; did you mean " + near + "?");
  }
  static const std::regex twice("^(.*): At Most 1 required but received ([0-9]+)$");
  std::smatch m;
  const std::string what = e.what();
  if (std::regex_match(what, m, twice)) return m[1].str() + " was given " + m[2].str() + " times; give it once";
  static const std::regex excludes("^(--[a-z0-9-]+) excludes (--[a-z0-9-]+)$");
  if (std::regex_match(what, m, excludes)) return m[1].str() + " and " + m[2].str() + " cannot be given together";
  static const std::regex missing("^(.*): [0-9]+ required (.*) missing$");
  if (std::regex_match(what, m, missing)) return m[1].str() + " needs a value (" + m[2].str() + ")";
  return what;
}

}  // namespace

int main(int argc, char** argv) {
  // Each line out as soon as it is printed, also into a file or a pipe (a long replay's log).
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  namespace tool = attnkit::tool;
  CLI::App app{"attnkit: the attention-backend layer of an LLM inference engine", "attnkit"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "attnkit 0.1.0");
  // Every option's default in --help (options whose default depends on others say so instead).
  app.option_defaults()->always_capture_default();
  app.footer("Run `attnkit SUBCOMMAND --help` for a subcommand's options.\n"
             "Exit status: 0 done, 1 a check or run failed (or a named backend cannot run here), "
             "2 a bad flag or value.");
  std::map<const CLI::App*, std::function<int()>> runners;
  for (auto add : {tool::add_list, tool::add_check, tool::add_bench, tool::add_tune, tool::add_replay, tool::add_report,
                   tool::add_jit, tool::add_warmup}) {
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
    std::cerr << "attnkit: " << explain(e, app) << " (see --help)\n";
    return 2;
  } catch (const attnkit::Error& e) {  // an option's own action (--threads)
    std::cerr << "attnkit: " << e.what() << '\n';
    return 2;
  }
  try {
    return runners.at(app.get_subcommands().front())();
  } catch (const attnkit::Error& e) {
    std::cerr << "attnkit: error: " << e.what() << '\n';
    return 1;
  }
}
