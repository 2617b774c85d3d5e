// Hierarchical rendezvous for very large jobs: nodes join through group leaders, so the job's
// store sees groups, not nodes. Every G-th node to arrive (by a ticket from the job's store) leads
// a group: it serves a small store of its own, the group's relay, and the next G - 1 nodes join
// the round there, speaking the same round protocol as with the job's store (dtrun/round.h). The
// relay forwards its members' messages to the job's keeper many at a time ("batch" items in the
// keeper's inbox), takes their slots in the round from the job's store in one request per batch,
// and copies back what they wait for: their assignments, the round's end, the open round. So the
// job's store holds a connection per group, not per node, and one request carries a group's joins.
//
// What a group costs in failure: its members' store is their leader's relay, so a leader that
// dies takes its group out of the job (the members lose their store, as a flat job's nodes lose
// the job's store); the keeper sees them all fall silent and the survivors re-rendezvous, as for
// any lost node. The node that hosts the job's store never joins through a group.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"
#include "dtrun/round.h"

namespace dtrun::rdzv {

struct GroupOptions {
  int size = 0;               // nodes per group, the leader included; below 2: no groups
  std::string listenHost;     // where a leader's relay listens ("" = every address)
  std::string advertiseHost;  // how the group's other members reach it (this node's address)
};

// One group's relay, run by its leader's agent (or by a benchmark).
class GroupRelay {
 public:
  GroupRelay() = default;
  GroupRelay(const GroupRelay&) = delete;
  GroupRelay& operator=(const GroupRelay&) = delete;
  GroupRelay(GroupRelay&&) = delete;
  GroupRelay& operator=(GroupRelay&&) = delete;
  virtual ~GroupRelay() = default;

  // Serves a relay store on `listenHost` (port 0: any free one) for job `jobId` of the store at
  // `jobStore`, whose token the relay's own store asks for too. Publishes the job's settings and
  // asks for its keeper unless the job has them.
  [[nodiscard]] static Result<std::unique_ptr<GroupRelay>> start(const ClientOptions& jobStore,
                                                                 const std::string& jobId,
                                                                 const RoundSettings& settings,
                                                                 const std::string& listenHost);
  [[nodiscard]] virtual std::uint16_t port() const = 0;
  // Blocks until every node that joined through this relay (or only `agentId`, when given) said
  // bye, left or fell silent (for the job's dead_after) and its messages reached the job's
  // keeper, at most `timeout`; names the nodes it gave up on in a warning. The leader's agent
  // calls it before it exits: for all at the job's end, for itself when it leaves alone.
  virtual void drain(std::chrono::milliseconds timeout, const std::string& agentId = {}) = 0;
};

// A node's member of job `jobId` at the store `jobStore`: through a group when `group.size` >= 2
// and this node does not host the job's store (`self.storeHost`), else RoundMember::connect.
// Costs the job's store one ticket and one read (a leader: a ticket and one write) per node.
[[nodiscard]] Result<std::unique_ptr<RoundMember>> connectGroupMember(const ClientOptions& jobStore,
                                                                      const std::string& jobId,
                                                                      const RoundSettings& settings,
                                                                      NodeRecord self,
                                                                      const GroupOptions& group);

}  // namespace dtrun::rdzv
