// The keeper of one job's rounds (runKeeper and the keeper service of dtrun/round.h run one per
// job): a loop over its job's inbox queue (a blocking pop: it wakes when a member writes, never
// polls) plus its own monotonic deadlines: the last call, heartbeats, the join and close timeouts.
// Its parts: keeper_rounds.cpp (the loop, joins, closing a round, members leaving),
// keeper_takeover.cpp (its saved state, a successor's resumption, a round's end) and
// keeper_deadlines.cpp (the clock: last call, join and close timeouts, heartbeats).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtrun/round.h"

#include "round_codec.h"

namespace dtrun::rdzv::detail {

// The longest a keeper blocks in one pop: how soon it notices that its service stops.
inline constexpr std::chrono::milliseconds kPopSlice{500};

inline std::string describeNode(int nodeRank, const NodeRecord& r) {
  return "node " + std::to_string(nodeRank) + " (" + r.host + ")";
}

// `ms` as "1.5 s" (tenths shown when not zero), for the keeper's log lines.
inline std::string seconds(std::chrono::milliseconds ms) {
  const auto tenths = ms.count() / 100;
  return std::to_string(tenths / 10) + (tenths % 10 != 0 ? "." + std::to_string(tenths % 10) : "") +
         " s";
}

class Keeper {
 public:
  using Clock = std::chrono::steady_clock;

  Keeper(std::unique_ptr<Store> store, const std::string& jobId, RoundSettings settings,
         const std::atomic<bool>& stopping, KeeperOptions options = {})
      : store_(std::move(store)),
        keys_(jobId),
        jobId_(jobId),
        settings_(settings),
        options_(std::move(options)),
        stopping_(stopping),
        expected_(settings.maxNodes) {}

  Status run();

 private:
  enum class Phase : std::uint8_t { kGathering, kRunning, kExiting, kClosed };

  struct Member {
    int slot = 0;
    NodeRecord record;
  };

  // ---- rounds (keeper_rounds.cpp) ----

  bool openRound(int r);

  // Worker groups of every round bootstrap under "/worker/attempt_<n>"; a membership change
  // keeps the attempt number, so the old round's keys must go before new workers look. torch's
  // TCPStore client puts its own "/" in front of every key: its keys arrive as "//worker/...".
  void clearWorkerKeys();

  void handle(const KeeperMessage& m);

  void onBye(const std::string& agentId);

  // Whether every member of the round said bye (spares say it too, and do not count).
  [[nodiscard]] bool membersGone() const;

  void onJoin(const KeeperMessage& m);

  // Counts an arrival in the gathering round: once per node, at its latest slot.
  void arrive(int slot, const NodeRecord& record);

  void considerClosing(Clock::time_point now);

  void closeRound();

  // A node that arrives while the round runs waits for its end (as a spare); when the job is
  // below max, that end comes now.
  void onLateArrival(int slot, const NodeRecord& record);

  void onDone(int slot);

  // `why`: the leaving agent's reason ("" = none given), e.g. a failed health check.
  void onLeave(const std::string& agentId, const std::string& why = {});

  // The backend saw `agentId` die (its lease expired): whatever round its last message named.
  void onLost(const std::string& agentId, const std::string& why);

  // ---- taking over (keeper_takeover.cpp) ----

  static constexpr std::array kPhaseNames = {"gathering", "running", "exiting", "closed"};

  // Writes what a successor needs; a failure is logged, not fatal: the job goes on, only a
  // takeover would start from an older round.
  void persist();

  // A keeper died; this one carries on from its last saved state. Joins and messages it had
  // taken from the inbox are gone, so the round it was in is ended (a membership change, not
  // charged) and every node joins the next one, unless the lost keeper's node was not a member
  // of a running round: then nothing restarts.
  Status resume(const detail::KeeperState& k);

  // The lost keeper's round was still gathering: its arrivals (taken from the inbox) are gone.
  // Every node that took a slot is told to wait as a spare for the round's end, which comes at
  // once; all of them join the next round, which this keeper gathers.
  Status restartGathering(const std::string& why);

  // Writes `end` unless the round already has one (a failing agent writes its own) and acts on
  // the end that holds.
  void endRound(const RoundEnd& end);

  void onRoundEnded(const RoundEnd& end);

  // ---- time (keeper_deadlines.cpp) ----

  // A keeper that did not run saw no heartbeat meanwhile, through no fault of the nodes: the
  // silence it did not watch is not theirs (issue 34: a 5 s SIGSTOP of the store's host made it
  // declare every node dead, its own included). Every clock it judges by moves on by the gap.
  void forgiveOwnStall(Clock::duration overrun);

  [[nodiscard]] Clock::time_point nextDeadline() const;

  void checkDeadlines(Clock::time_point now);

  void reportGathering(Clock::time_point now);

  void checkHeartbeats(Clock::time_point now);

  void finish(const std::string& why);

  std::unique_ptr<Store> store_;
  RoundKeys keys_;
  std::string jobId_;
  RoundSettings settings_;
  KeeperOptions options_;
  const std::atomic<bool>& stopping_;
  int round_ = 0;
  int attempt_ = 0;
  int noProgressStreak_ = 0;  // failed rounds in a row whose failing node saw no progress
  int expected_;
  Phase phase_ = Phase::kGathering;
  std::vector<Member> arrived_;
  // arrived_'s positions by agent and by slot: a join costs O(1), not a scan of every arrival
  // (65,536 joins would make that 2 billion comparisons).
  std::unordered_map<std::string, std::size_t> arrivedByAgent_;
  std::unordered_map<int, std::size_t> arrivedBySlot_;
  std::vector<Member> members_;
  std::set<int> done_;
  std::vector<KeeperMessage> early_;
  std::map<std::string, NodeRecord> spares_;
  std::map<std::string, Clock::time_point> lastSeen_;
  std::set<std::string> lost_;
  std::set<std::string> byes_;
  std::optional<RoundEnd> closedBy_;
  std::optional<Clock::time_point> lastCall_;
  Clock::time_point opened_;
  Clock::time_point lastStatus_;
  Clock::time_point closeUntil_;
  bool finished_ = false;
  Status deposed_;  // not ok once a write was refused: another keeper leads the job
};

}  // namespace dtrun::rdzv::detail
