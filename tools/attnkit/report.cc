// `attnkit report RESULTS.json... -o report.html`: one self-contained HTML page (tables and inline
// SVG plots) from replay and bench result files. The page itself is built in src/serving/report.cc.
#include <fstream>
#include <iostream>
#include <sstream>

#include "attnkit/error.h"
#include "commands.h"
#include "options.h"
#include "serving/report.h"

namespace attnkit::tool {

namespace {

struct Options {
  std::vector<std::string> inputs;
  std::string output = "report.html";
  std::string title = "attnkit results";
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream text;
  text << f.rdbuf();
  return nlohmann::json::parse(text.str());
}

// A results file that is not JSON is a bad argument (exit 2), found before any work.
CLI::Validator json_file() {
  return CLI::Validator(
      [](std::string& path) {
        try {
          read_json(path);
        } catch (const nlohmann::json::exception& e) {
          return path + " is not JSON: " + e.what();
        }
        return std::string();
      },
      "JSON");
}

}  // namespace

std::function<int()> add_report(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("report", "Write an HTML page with plots from replay and bench JSON files");
  auto o = std::make_shared<Options>();
  cmd->add_option("results", o->inputs, "Result files from `attnkit replay --json` or `attnkit bench --json`")
      ->required()
      ->check(CLI::ExistingFile & json_file())
      ->default_str("");
  cmd->add_option("-o,--output", o->output, "The HTML file to write")->check(writable_file());
  cmd->add_option("--title", o->title, "The page's title");
  return [o] {
    std::vector<serving::ReportInput> inputs;
    for (const std::string& path : o->inputs) inputs.push_back({path, read_json(path)});
    if (!serving::gnuplot_available()) {
      std::cerr << "attnkit: warning: gnuplot is not installed (apt-get install gnuplot-nox): the page has tables "
                   "but no plots\n";
    }
    const std::string html = serving::build_report(inputs, o->title);
    std::ofstream out(o->output);
    ATTNKIT_CHECK(out.good(), "report: --output file '", o->output, "' cannot be written");
    out << html;
    std::cout << "report: " << o->output << " (" << html.size() / 1024 << " KiB, "
              << count_of(inputs.size(), "result file") << ")\n";
    return 0;
  };
}

}  // namespace attnkit::tool
