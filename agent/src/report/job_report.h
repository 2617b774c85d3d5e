// One report for a job of several nodes: at the end every agent leaves its own record (the run
// report of its node) in the job's store, before it passes the exit barrier; the agent that
// hosts the store, past the barrier, reads them all into its --report as "node_reports". Two
// store calls per node, once per job.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

namespace dtrun::agent::detail {

// Leaves `report` (this node's run report, JSON text) under the job's report keys. `stores`
// should connect with a short timeout: the job is over and its store about to go.
Status sendNodeReport(const rdzv::StoreFactory& stores, const std::string& runId,
                      const std::string& report);

// Every report left so far, in the order they arrived.
Result<std::vector<std::string>> gatherNodeReports(const rdzv::StoreFactory& stores,
                                                   const std::string& runId);

}  // namespace dtrun::agent::detail
