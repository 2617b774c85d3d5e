// Multi-node rendezvous in rounds, over the store. A round gathers min..max nodes; each node
// costs O(1) store operations per round (an arrival counter, its record, a message to the
// keeper, its own assignment). The keeper of a job runs in the process that hosts the store (an
// agent or `dtrun store`, through KeeperService): it closes rounds, assigns node ranks, judges
// heartbeats with its own monotonic clock, ends rounds on membership changes and keeps the
// job's restart budget. Keys of job J live under "dtrun/J/", those of round N under
// "dtrun/J/r<N>/", so nothing of an old round is ever read by a new one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

namespace dtrun::rdzv {

// What every agent exits with when the keeper stops a job in a crash loop (agent::kExitNoProgress).
constexpr int kExitNoProgress = 86;

// torchrun's --rdzv_conf names and defaults; the job's first agent publishes them and the
// keeper follows them.
struct RoundSettings {
  int minNodes = 1;
  int maxNodes = 1;
  int maxRestarts = 0;
  // Failed rounds in a row without progress after which the job stops (0 = never): dtrun's
  // --max_no_progress_attempts, the keeper's half of it.
  int maxNoProgress = 0;
  std::chrono::milliseconds joinTimeout{600000};
  std::chrono::milliseconds lastCallTimeout{30000};
  std::chrono::milliseconds closeTimeout{30000};  // the exit barrier's limit
  std::chrono::milliseconds keepAliveInterval{5000};
  int keepAliveMaxAttempt = 3;
  [[nodiscard]] std::chrono::milliseconds deadAfter() const {
    return keepAliveInterval * keepAliveMaxAttempt;
  }
};

// What a node tells the others about itself when it joins.
struct NodeRecord {
  std::string agentId;  // unique per agent process: "<host>:<pid>"
  std::string host;
  int nproc = 1;
  int nodeRankHint = -1;    // explicit --node_rank; -1 none
  int schedulerOrder = -1;  // the batch scheduler's node order (SLURM_NODEID...); -1 none
  bool storeHost = false;   // this agent hosts the store: node 0 unless a hint says otherwise
  // The port of the workers' store this agent serves (0 = none). Every agent but the store's
  // host serves one; in a round without the store's host (etcd, a shared `dtrun store`) node
  // 0's is the workers'.
  int workerStorePort = 0;
};

// A node's place in a closed round.
struct Assignment {
  int round = 0;
  int attempt = 0;  // the job's restart count: TORCHELASTIC_RESTART_COUNT on every node
  int nodeRank = 0;
  int nodeCount = 0;
  int rankOffset = 0;  // this node's first global rank (prefix sum of local world sizes)
  int worldSize = 0;
  // Where the round's workers find their store (MASTER_ADDR/MASTER_PORT): node 0's host and
  // workers' store port; empty/0 when the nodes serve none (the job's store is the workers').
  std::string masterAddr;
  int masterPort = 0;
};

// Why a round (or the whole job) ended.
struct RoundEnd {
  enum class Kind : std::uint8_t {
    kFailure,     // a worker failed somewhere: a restart is charged
    kMembership,  // a node joined, left or went silent: not charged
    kSuccess,     // every node's workers succeeded
    kClosed,      // the job is over: restarts used up, or fewer than min nodes remain
  };
  Kind kind = Kind::kFailure;
  std::string message;  // one line, e.g. "node 2 (host-c) lost: no heartbeat for 15 s"
  std::string detail;   // the failing agent's report of its root cause (JSON text), if any
  int exitCode = 1;     // what every agent exits with when the job is over
  // kFailure: whether the failed attempt moved the job forward (false only when the failing
  // node's ranks report progress and none got past its start), and whether the failed worker
  // asked not to be restarted. The keeper stops the job early on either.
  bool progressed = true;
  bool noRestart = false;
};

struct JoinOutcome {
  bool closed = false;  // the job is over: `end` says why
  Assignment assignment;
  RoundEnd end;
};

// One node's side of the protocol. Waiting calls (join, waitEnd, waitFinished) come from one
// thread, notifications (everything else) from another: each has its own connection.
class RoundMember {
 public:
  RoundMember() = default;
  RoundMember(const RoundMember&) = delete;
  RoundMember& operator=(const RoundMember&) = delete;
  RoundMember(RoundMember&&) = delete;
  RoundMember& operator=(RoundMember&&) = delete;
  virtual ~RoundMember() = default;

  // `store.timeout` is the read timeout: a store that stays silent that long is lost. Asks the
  // store's keeper service for this job's keeper unless one exists.
  [[nodiscard]] static Result<std::unique_ptr<RoundMember>> connect(const ClientOptions& store,
                                                                    const std::string& jobId,
                                                                    const RoundSettings& settings,
                                                                    NodeRecord self);
  // The same over two Store connections the caller opened: `waiter` for the waiting calls,
  // `notifier` for the rest (each used by one thread at a time). Asks for a keeper as connect().
  [[nodiscard]] static Result<std::unique_ptr<RoundMember>> create(std::unique_ptr<Store> waiter,
                                                                   std::unique_ptr<Store> notifier,
                                                                   const std::string& jobId,
                                                                   const RoundSettings& settings,
                                                                   NodeRecord self);
  // The same over any store (etcd); `askKeeperService` false when the job's keeper is elected
  // among its agents instead (the settings are still published for it).
  [[nodiscard]] static Result<std::unique_ptr<RoundMember>> connect(const StoreFactory& store,
                                                                    const std::string& jobId,
                                                                    const RoundSettings& settings,
                                                                    NodeRecord self,
                                                                    bool askKeeperService);
  // The same with the notifier from `notifiers`: connections whose requests must land within
  // the keeper's dead-after time (heartbeats), where the waiter's may wait longer.
  [[nodiscard]] static Result<std::unique_ptr<RoundMember>> connect(
      const StoreFactory& waiters, const StoreFactory& notifiers, const std::string& jobId,
      const RoundSettings& settings, NodeRecord self, bool askKeeperService);

  // Joins the open round and returns this node's assignment, or closed=true once the job is
  // over. A node that finds the round full waits as a spare for a later round. `progress` gets
  // the keeper's "waiting for ..." line now and then; `cancel` makes it return kCancelled.
  virtual Result<JoinOutcome> join(const std::atomic<bool>& cancel,
                                   const std::function<void(const std::string&)>& progress) = 0;
  // Blocks until the joined round ends (a waiting request: it completes when the end is written).
  virtual Result<RoundEnd> waitEnd(const std::atomic<bool>& cancel) = 0;
  // Ends the joined round for every node, unless it already ended; returns the end that holds.
  virtual Result<RoundEnd> endRound(const RoundEnd& end) = 0;
  virtual Status heartbeat() = 0;
  // This node's workers all succeeded; the round ends with success once every node said so.
  virtual Status done() = 0;
  // This node leaves the job (a signal stopped it): the others re-rendezvous at once.
  virtual Status leave(const std::string& why) = 0;
  // After a successful end: counts this node out at the exit barrier.
  virtual Status bye() = 0;
  // The store host's agent: waits until every node passed the exit barrier (or the close
  // timeout), so the store outlives everyone's last request.
  virtual Status waitFinished(std::chrono::milliseconds timeout) = 0;
};

// A keeper run by an agent elected for it (the etcd backend) rather than beside the store.
struct KeeperOptions {
  // The agents alive now (agentIds), as the backend's leases say: asked when a keeper takes over
  // from one that died, so the nodes lost with it are not waited for. Null: trust heartbeats.
  std::function<Result<std::vector<std::string>>()> aliveAgents;
};

// Runs job `jobId`'s keeper on the calling thread until the job is finished, `stopping` is set
// or the store fails. The keeper keeps its state in the store after every change of round, so
// a keeper started where another left off (it died) takes over from there: it ends the round
// the lost nodes were in (a membership change, not charged) and carries the restart count, the
// no-progress streak and the spares into the next one.
Status runKeeper(std::unique_ptr<Store> store, const std::string& jobId,
                 const KeeperOptions& options, const std::atomic<bool>& stopping);

// Tells the job's keeper that an agent is gone (its lease expired), whatever round it was in:
// a member's round ends at once, a spare is forgotten, an arrival is dropped.
Status reportLost(Store& store, const std::string& jobId, const std::string& agentId,
                  const std::string& why);

// Runs a keeper for every job that asks, on a thread with its own connection to the store at
// 127.0.0.1:port. Stops (and joins its threads) when destroyed.
class KeeperService {
 public:
  KeeperService() = default;
  KeeperService(const KeeperService&) = delete;
  KeeperService& operator=(const KeeperService&) = delete;
  KeeperService(KeeperService&&) = delete;
  KeeperService& operator=(KeeperService&&) = delete;
  virtual ~KeeperService() = default;
  // `token`: the store's (ServerOptions::token), presented by the keepers' own connections.
  // `storeHost`: an address the store answers on from this host (its --host when it listens on
  // one address only).
  [[nodiscard]] static Result<std::unique_ptr<KeeperService>> start(
      std::uint16_t storePort, const std::string& token = {},
      const std::string& storeHost = "127.0.0.1");
};

}  // namespace dtrun::rdzv
