// Facts about this machine and process, read once: the launcher's only system calls. validate()
// gets them as HostFacts, so it stays pure and tests feed their own.
#pragma once

#include <string>
#include <vector>

#include "launch_model.h"

namespace dtrun::launcher {

// The process environment, the GPUs workers can use (/dev/nvidia[0-9]* narrowed by
// CUDA_VISIBLE_DEVICES), std::thread::hardware_concurrency, PATH lookups, this host's names and
// addresses, files. Call once, before threads start.
HostFacts readHostFacts();

// The process environment as "NAME=value" entries.
std::vector<std::string> environSnapshot();

}  // namespace dtrun::launcher
