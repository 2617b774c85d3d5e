// The rendezvous options (--rdzv_backend, --rdzv_endpoint, --rdzv_id, --rdzv_conf, --master_addr,
// --master_port, --local_addr, --node_rank) to where the job's store is and who hosts it, and the
// store's token. Part of validate() (launch_plan.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dtrun/agent.h"
#include "dtrun/common.h"

#include "launch_model.h"
#include "resolver.h"

namespace dtrun::launcher {

// The store endpoint, run id and MASTER_ADDR, from the backend and its options.
[[nodiscard]] Status resolveRendezvous(const Resolver& options, const HostFacts& host,
                                       bool standalone, LaunchPlan& plan);

// Multi-node settings: who hosts the store, the node rank hint and the --rdzv_conf timeouts.
[[nodiscard]] Result<agent::MultiNodeConfig> resolveMultiNode(const Resolver& options,
                                                              const HostFacts& host,
                                                              LaunchPlan& plan, int nodeRank);

// The store's token from --rdzv_conf token, --rdzv_conf token_file, DTRUN_STORE_TOKEN or
// DTRUN_STORE_TOKEN_FILE (first found wins; "" = none; a file's trailing newline is dropped).
// Errors name the source: an unreadable file, an empty token or one with spaces.
[[nodiscard]] Result<std::string> resolveStoreToken(
    const std::vector<std::pair<std::string, std::string>>& rdzvConf, const HostFacts& host);

}  // namespace dtrun::launcher
