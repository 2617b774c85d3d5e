// dtrun/agent.h's plannedWorkerEnvironment (what --dry-run shows): attempt 0's placement of one
// worker, through the same function that gives the workers their environment.
#include <filesystem>
#include <string>
#include <vector>

#include "dtrun/agent.h"

#include "workers/workers.h"

namespace dtrun::agent {

std::vector<std::string> plannedWorkerEnvironment(const AgentConfig& config,
                                                  const std::vector<std::string>& inherited,
                                                  int nodeRank, int nodeCount, int localRank,
                                                  const std::string& logDir) {
  detail::WorkerPlacement placement;
  placement.localRank = localRank;
  placement.rank = nodeRank * config.nprocPerNode + localRank;
  placement.worldSize = nodeCount * config.nprocPerNode;
  placement.groupRank = nodeRank;
  placement.groupWorldSize = nodeCount;
  placement.masterAddr = config.masterAddr;
  placement.masterPort = config.storePort;
  if (!config.discardsLogs()) {
    placement.errorFile = logDir + "/error.json";
    placement.logDir = logDir;
    placement.progressFile = (std::filesystem::path(logDir).parent_path() / "progress").string();
  }
  return detail::workerEnvironment(inherited, config, placement);
}

}  // namespace dtrun::agent
