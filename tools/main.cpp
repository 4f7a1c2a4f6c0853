// `zero`: one binary, many sub-commands (config, report, estimate, bench ...). Each
// sub-command lives in its own file and registers itself; this file only dispatches.
#include <cstring>
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
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_help(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  // Prefer a two-word match ("bench comm") over a one-word one ("bench").
  for (int words = 2; words >= 1; --words) {
    if (argc < 1 + words) continue;
    std::string name = argv[1];
    if (words == 2) name += std::string(" ") + argv[2];
    for (const Command& c : commands()) {
      if (name != c.name) continue;
      std::vector<std::string> args{name};
      for (int i = 1 + words; i < argc; ++i) args.emplace_back(argv[i]);
      try {
        return c.run(args);
      } catch (const std::exception& e) {
        std::cerr << "zero " << name << ": error: " << e.what() << "\n";
        return 2;
      }
    }
  }
  std::cerr << "zero: unknown command '" << argv[1] << "'\n";
  print_help(std::cerr);
  return 2;
}
