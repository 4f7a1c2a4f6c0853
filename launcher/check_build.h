// `zerorun --check-build` (horovodrun's --check-build): the frameworks, controllers and
// collective backends this build has, and which controllers' commands this machine can run.
#pragma once

#include <string>

namespace zero::launcher {

// The report; `path` is searched for the controllers' commands (srun, mpirun, ssh, pdsh).
std::string check_build_text(const std::string& path);

}  // namespace zero::launcher
