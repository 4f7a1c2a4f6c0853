// `zero clean-swap PATH [--force]`: removes the swap directories (PATH/<job id>/rank<N>/) that
// crashed jobs left under an nvme_path, keeping those whose owner may still be running.
#include <zero/offload/swap_dir.h>

#include <iostream>

#include "command.h"

namespace zero::tools {
namespace {

constexpr const char* kUsage =
    "usage: zero clean-swap PATH [--force]\n"
    "  removes the job directories a ZeRO-Infinity run left under PATH (its nvme_path):\n"
    "  each PATH/<job id>/ whose rank<N>/owner files all name a process of this host that is\n"
    "  gone. Directories of live processes, of other hosts, and anything that is not a swap\n"
    "  job directory are kept and listed with the reason.\n"
    "  --force   also remove swap job directories whose owner may be alive or is on another\n"
    "            host (only when you know no job uses them)\n";

int run_clean_swap(const std::vector<std::string>& args) {
  std::string path;
  bool force = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (args[i] == "--force") {
      force = true;
    } else if (!args[i].empty() && args[i][0] != '-' && path.empty()) {
      path = args[i];
    } else {
      std::cerr << "zero clean-swap: unexpected argument '" << args[i] << "'\n" << kUsage;
      return 2;
    }
  }
  if (path.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const offload::CleanResult result = offload::clean_swap(path, force);
  for (const std::string& dir : result.removed) std::cout << "removed " << dir << "\n";
  for (const auto& [dir, why] : result.kept) std::cout << "kept    " << dir << ": " << why << "\n";
  std::cout << result.removed.size() << " removed, " << result.kept.size() << " kept\n";
  return 0;
}

}  // namespace

ZERO_COMMAND("clean-swap",
             "remove swap directories that dead jobs left under an nvme_path (PATH [--force])",
             run_clean_swap);

}  // namespace zero::tools
