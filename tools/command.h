// The `zero` tool's sub-commands: each file in tools/ registers one with ZERO_COMMAND and
// main.cpp dispatches on the first one or two words ("config", "bench comm").
#pragma once

#include <string>
#include <vector>

namespace zero::tools {

// argv[0] is the command name ("config", "bench comm"); the rest are its arguments.
using CommandFn = int (*)(const std::vector<std::string>& args);

struct Command {
  const char* name;     // one or two words: "report", "bench adam"
  const char* summary;  // one line for `zero --help`
  CommandFn run;        // returns the process exit code
};

bool register_command(const Command& command);
const std::vector<Command>& commands();

}  // namespace zero::tools

#define ZERO_COMMAND_CAT2(a, b) a##b
#define ZERO_COMMAND_CAT(a, b) ZERO_COMMAND_CAT2(a, b)
#define ZERO_COMMAND(name, summary, fn)                                    \
  static const bool ZERO_COMMAND_CAT(zero_command_registered_, __LINE__) = \
      ::zero::tools::register_command({name, summary, fn})
