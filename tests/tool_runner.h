// Runs the `attnkit` tool for tests that check its output and exit status. ATTNKIT_TOOL names the
// tool where the tests run away from their build tree (staged binaries); else the built one.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace attnkit::testing {

struct ToolRun {
  int status = -1;     // the exit status; -1 when the tool did not exit normally
  std::string output;  // stdout and stderr together
};

inline ToolRun run_tool(const std::string& args) {
  ToolRun r;
  const char* tool = std::getenv("ATTNKIT_TOOL");
  const std::string cmd = std::string(tool && *tool ? tool : ATTNKIT_TOOL_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) r.output += buf.data();
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

}  // namespace attnkit::testing
