// What an agent connects to before its first round: the store it may host (with the keepers of a
// multi-node job beside it), and its membership of the job's rounds. Blocking set-up calls, made
// once by the agent before its loop runs.
#pragma once

#include <memory>
#include <string>

#include "dtrun/agent.h"
#include "dtrun/common.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

namespace dtrun::agent::detail {

// The store this agent serves: one node's own store, or a multi-node job's on its host. Null
// when c10d guessed this host and the port is taken (another agent or `dtrun store` serves it).
Result<std::unique_ptr<rdzv::StoreServer>> startAgentStore(const AgentConfig& config);

// A multi-node agent's link to the job.
struct JobLink {
  std::unique_ptr<rdzv::KeeperService> keepers;  // beside a store this agent hosts
  std::unique_ptr<rdzv::RoundMember> member;
  rdzv::ClientOptions client;  // how this agent reaches the job's store
};

// Starts the keeper service beside `store` (when this agent hosts it) and joins the job as
// `host`'s member.
Result<JobLink> connectJob(const AgentConfig& config, const MultiNodeConfig& multi,
                           const std::string& host, const rdzv::StoreServer* store);

}  // namespace dtrun::agent::detail
