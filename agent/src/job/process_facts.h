// What the agent's own process was given: its environment (the workers' starting point) and
// the host's name (every line and report names the node by it).
#pragma once

#include <string>
#include <vector>

namespace dtrun::agent::detail {

// environ as "NAME=value" entries, taken once: the workers' environments start from it.
std::vector<std::string> environSnapshot();
// The value of `name` in such a snapshot; "" when absent.
std::string envValue(const std::vector<std::string>& env, const std::string& name);
// gethostname(), or "localhost" when it fails.
std::string hostName();

}  // namespace dtrun::agent::detail
