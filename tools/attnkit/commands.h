// The subcommands of the `attnkit` tool: each adds itself to the parser and returns an exit status.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace attnkit::tool {

// Each returns the function that runs the subcommand once parsing succeeded (exit status).
std::function<int()> add_list(CLI::App& app);
std::function<int()> add_check(CLI::App& app);
std::function<int()> add_bench(CLI::App& app);
std::function<int()> add_replay(CLI::App& app);
std::function<int()> add_report(CLI::App& app);
std::function<int()> add_tune(CLI::App& app);
std::function<int()> add_jit(CLI::App& app);
std::function<int()> add_warmup(CLI::App& app);

}  // namespace attnkit::tool
