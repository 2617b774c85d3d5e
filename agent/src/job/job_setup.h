// What an agent connects to before its first round: the store it may host (with the keepers of a
// multi-node job beside it), and its membership of the job's rounds. Blocking set-up calls, made
// once by the agent before its loop runs.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "dtrun/agent_config.h"
#include "dtrun/common.h"
#include "dtrun/etcd.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

namespace dtrun::agent::detail {

// The store this agent serves: one node's own store, or a multi-node job's on its host. Null
// when c10d guessed this host and the port is taken (another agent or `dtrun store` serves it).
Result<std::unique_ptr<rdzv::StoreServer>> startAgentStore(const AgentConfig& config);

// A multi-node agent's link to the job.
struct JobLink {
  std::unique_ptr<rdzv::KeeperService> keepers;  // beside a store this agent hosts
  std::unique_ptr<rdzv::EtcdPresence> etcd;      // --rdzv_backend=etcd: lease, keeper election
  // c10d, this agent not the store's host: its workers' store (its port is in the node's record).
  std::unique_ptr<rdzv::StoreServer> workersStore;
  std::unique_ptr<rdzv::RoundMember> member;
  rdzv::StoreFactory stores;        // connections to the job's store
  rdzv::StoreFactory reportStores;  // the same with a short timeout, for the end of the job
};

// Starts the keeper service beside `store` (when this agent hosts it) and joins the job as
// `host`'s member. With etcd, `store` is this agent's workers' store (its port goes into the
// node's record) and `onLeaseLost` hears when etcd presumed this agent dead. With c10d, an agent
// that does not host the store starts a workers' store (JobLink::workersStore, in the record
// too): the workers' when the round lacks the store's host (a shared `dtrun store`).
Result<JobLink> connectJob(const AgentConfig& config, const MultiNodeConfig& multi,
                           const std::string& host, const rdzv::StoreServer* store,
                           std::function<void(const Status&)> onLeaseLost);

// Empties this agent's workers' store before a round (etcd, or a shared `dtrun store`: the keys
// of the last round's workers must be gone before the next round's look).
Status clearWorkerStore(std::uint16_t port, const std::string& token);

}  // namespace dtrun::agent::detail
