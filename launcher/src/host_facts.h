// Facts about this machine and process, read once: the only system calls of the launcher
// (readHostFacts is declared in launch_options.h, so that validate() stays pure).
#pragma once

#include <string>
#include <vector>

namespace dtrun::launcher {

// The process environment as "NAME=value" entries.
std::vector<std::string> environSnapshot();

}  // namespace dtrun::launcher
