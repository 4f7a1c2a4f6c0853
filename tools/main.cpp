// `zero`: one binary, many sub-commands (config, report, estimate, bench ...). Each
// sub-command lives in its own file and registers itself; this file only dispatches.
#include <zero/engine/args.h>

#include <exception>
#include <iostream>

#include "command.h"

namespace zero::tools {

static std::vector<Command>& registry() {
  static std::vector<Command> all;
  return all;
}
bool register_command(const Command& command) {
  registry().push_back(command);
  return true;
}
const std::vector<Command>& commands() {
  return registry();
}

static void print_help(std::ostream& out) {
  out << "usage: zero COMMAND [ARGS...]\n\ncommands:\n";
  for (const Command& c : commands()) out << "  " << c.name << "\n      " << c.summary << "\n";
}

}  // namespace zero::tools

int main(int argc, char** argv) {
  using namespace zero::tools;
  // zerorun appends --local_rank=N, as DeepSpeed's launcher does; no command needs it.
  std::vector<std::string> argw;
  try {
    argw = zero::drop_local_rank(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "zero: " << e.what() << "\n";
    return 2;
  }
  if (argw.empty() || argw[0] == "--help" || argw[0] == "-h") {
    print_help(argw.empty() ? std::cerr : std::cout);
    return argw.empty() ? 2 : 0;
  }
  // Prefer a two-word match ("bench comm") over a one-word one ("bench").
  for (size_t words = 2; words >= 1; --words) {
    if (argw.size() < words) continue;
    std::string name = argw[0];
    if (words == 2) name += " " + argw[1];
    for (const Command& c : commands()) {
      if (name != c.name) continue;
      std::vector<std::string> args{name};
      args.insert(args.end(), argw.begin() + static_cast<std::ptrdiff_t>(words), argw.end());
      try {
        return c.run(args);
      } catch (const std::exception& e) {
        std::cerr << "zero " << name << ": error: " << e.what() << "\n";
        return 2;
      }
    }
  }
  std::cerr << "zero: unknown command '" << argw[0] << "'\n";
  print_help(std::cerr);
  return 2;
}
