// The keeper of a job's rounds and the service that starts one per job. A keeper is a loop over
// its job's inbox queue (a blocking pop: it wakes when a member writes, never polls) plus its
// own monotonic deadlines: the last call, heartbeats, the join and close timeouts.
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "dtrun/round.h"

#include "log.h"
#include "round_codec.h"

namespace dtrun::rdzv {
namespace {

using detail::AssignValue;
using detail::KeeperMessage;
using detail::RoundKeys;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The longest a keeper blocks in one pop: how soon it notices that its service stops.
constexpr milliseconds kPopSlice{500};
constexpr milliseconds kStatusEvery{5000};
// Longer than this beyond its pop's wait between two looks at the clock, and the keeper itself
// did not run (its process stopped, its host swapping, a store call stuck).
constexpr milliseconds kStallSlack{1000};
// Messages taken from the inbox per pop: thousands of joins cost a few round trips, not one each.
constexpr std::size_t kPopBatch = 1024;

std::string describeNode(int nodeRank, const NodeRecord& r) {
  return "node " + std::to_string(nodeRank) + " (" + r.host + ")";
}

std::string seconds(milliseconds ms) {
  const auto tenths = ms.count() / 100;
  return std::to_string(tenths / 10) + (tenths % 10 != 0 ? "." + std::to_string(tenths % 10) : "") +
         " s";
}

class Keeper {
 public:
  Keeper(std::unique_ptr<Store> store, const std::string& jobId, RoundSettings settings,
         const std::atomic<bool>& stopping, KeeperOptions options = {})
      : store_(std::move(store)),
        keys_(jobId),
        jobId_(jobId),
        settings_(settings),
        options_(std::move(options)),
        stopping_(stopping),
        expected_(settings.maxNodes) {}

  Status run() {
    log::rdzv().info("keeper of job '{}': {}..{} nodes, last call {}, dead after {}", jobId_,
                     settings_.minNodes, settings_.maxNodes, seconds(settings_.lastCallTimeout),
                     seconds(settings_.deadAfter()));
    DTRUN_ASSIGN_OR_RETURN(auto left, store_->tryGet(keys_.keeperState()));
    const auto state = left ? detail::decodeKeeperState(*left) : std::nullopt;
    if (state) {
      DTRUN_TRY(resume(*state));
    } else if (!openRound(0)) {
      return Status::connection("keeper of job '" + jobId_ + "': cannot open round 0");
    }
    while (!stopping_.load() && !finished_) {
      const auto turn = Clock::now();
      const auto wait = std::clamp(std::chrono::duration_cast<milliseconds>(nextDeadline() - turn),
                                   milliseconds(1), kPopSlice);
      auto items = store_->queuePopMany(keys_.inbox(), kPopBatch, wait);
      if (items.isOk()) {
        for (const auto& item : items.value()) {
          if (const auto message = detail::decodeMessage(item)) {
            handle(*message);
          } else {
            log::rdzv().warn("keeper of job '{}': ignoring a malformed message '{}'", jobId_,
                             item.substr(0, 80));
          }
        }
      } else if (items.status().code() != Errc::kTimeout) {
        log::rdzv().error("keeper of job '{}' lost its store: {}", jobId_,
                          items.status().message());
        return items.status();
      }
      const auto now = Clock::now();
      forgiveOwnStall(now - turn - wait);
      checkDeadlines(now);
      if (!deposed_.isOk()) {
        return deposed_;
      }
    }
    return Status::ok();
  }

 private:
  enum class Phase : std::uint8_t { kGathering, kRunning, kExiting, kClosed };

  struct Member {
    int slot = 0;
    NodeRecord record;
  };

  // ---- rounds ----

  bool openRound(int r) {
    round_ = r;
    phase_ = closedBy_ ? Phase::kClosed : Phase::kGathering;
    arrived_.clear();
    members_.clear();
    done_.clear();
    lastCall_.reset();
    opened_ = Clock::now();
    lastStatus_ = opened_;
    if (r > 0) {
      clearWorkerKeys();
    }
    if (auto s = store_->set(keys_.round(), std::to_string(r)); !s.isOk()) {
      log::rdzv().error("keeper of job '{}': {}", jobId_, s.message());
      return false;
    }
    if (closedBy_) {
      closeUntil_ = Clock::now() + settings_.closeTimeout;
    }
    persist();
    auto early = std::exchange(early_, {});
    for (const auto& m : early) {
      handle(m);
    }
    return true;
  }

  // Worker groups of every round bootstrap under "/worker/attempt_<n>"; a membership change
  // keeps the attempt number, so the old round's keys must go before new workers look. torch's
  // TCPStore client puts its own "/" in front of every key: its keys arrive as "//worker/...".
  void clearWorkerKeys() {
    auto keys = store_->listKeys();
    if (!keys.isOk()) {
      return;
    }
    for (const auto& key : keys.value()) {
      if (key.starts_with("/worker/") || key.starts_with("//worker/")) {
        static_cast<void>(store_->deleteKey(key));
      }
    }
  }

  void handle(const KeeperMessage& m) {
    const auto now = Clock::now();
    lastSeen_[m.agentId] = now;
    if (m.verb == "hb") {
      return;
    }
    if (m.verb == "lost") {
      onLost(m.agentId, m.payload);
      return;
    }
    if (m.verb == "leave" && !m.payload.empty()) {  // its reason, whichever round it names
      log::rdzv().warn("job '{}': {} leaves: {}", jobId_, m.agentId, m.payload);
    }
    if (m.round > round_) {
      early_.push_back(m);  // a node saw this round end before the keeper did
      return;
    }
    if (m.round < round_) {
      // About a round that already ended: its end tells the sender what to do. A node that
      // joined it too late is told to wait for that end (it is there already).
      if (m.verb == "join") {
        AssignValue v;
        v.kind = AssignValue::Kind::kSpare;
        static_cast<void>(store_->set(keys_.assign(m.round, m.slot), detail::encodeAssign(v)));
      } else if (m.verb == "leave" && (phase_ == Phase::kClosed || phase_ == Phase::kExiting)) {
        onLeave(m.agentId);  // it left during the round that ended the job
      }
      return;
    }
    if (m.verb == "join") {
      onJoin(m);
    } else if (m.verb == "fail") {
      if (auto end = store_->get(keys_.end(round_)); end.isOk()) {
        if (auto decoded = detail::decodeEnd(end.value())) {
          onRoundEnded(*decoded);
        }
      }
    } else if (m.verb == "done") {
      onDone(m.slot);
    } else if (m.verb == "leave") {
      onLeave(m.agentId, m.payload);
    } else if (m.verb == "bye") {
      onBye(m.agentId);
    }
  }

  void onBye(const std::string& agentId) {
    byes_.insert(agentId);
    if (phase_ == Phase::kExiting && membersGone()) {
      finish("every node passed the exit barrier");
    } else if (phase_ == Phase::kClosed && byes_.size() >= static_cast<std::size_t>(expected_)) {
      finish("every node learned that the job is over");
    }
  }

  // Whether every member of the round said bye (spares say it too, and do not count).
  [[nodiscard]] bool membersGone() const {
    return std::all_of(members_.begin(), members_.end(),
                       [this](const Member& m) { return byes_.count(m.record.agentId) != 0; });
  }

  void onJoin(const KeeperMessage& m) {
    const int slot = m.slot;
    const auto record = detail::decodeRecord(m.payload);
    if (!record) {
      log::rdzv().warn("keeper of job '{}': round {} slot {} joined without a valid record", jobId_,
                       round_, slot);
      return;
    }
    switch (phase_) {
      case Phase::kClosed: {
        AssignValue v;
        v.kind = AssignValue::Kind::kClosed;
        v.closedBy = *closedBy_;
        static_cast<void>(store_->set(keys_.assign(round_, slot), detail::encodeAssign(v)));
        return;
      }
      case Phase::kGathering:
        arrived_.push_back({slot, *record});
        considerClosing(Clock::now());
        return;
      case Phase::kRunning:
      case Phase::kExiting:
        onLateArrival(slot, *record);
        return;
    }
  }

  void considerClosing(Clock::time_point now) {
    const int n = static_cast<int>(arrived_.size());
    if (n >= settings_.maxNodes || (n >= settings_.minNodes && n >= expected_)) {
      closeRound();
    } else if (n >= settings_.minNodes) {
      if (!lastCall_) {
        lastCall_ = now + settings_.lastCallTimeout;
      }
      if (now >= *lastCall_) {
        closeRound();
      }
    }
  }

  void closeRound() {
    std::vector<NodeRecord> records;
    records.reserve(arrived_.size());
    for (const auto& a : arrived_) {
      records.push_back(a.record);
    }
    const auto order = detail::orderNodes(records, settings_.maxNodes);
    Assignment a;
    a.round = round_;
    a.attempt = attempt_;
    a.nodeCount = static_cast<int>(order.size());
    std::string hosts;
    for (const auto i : order) {
      a.worldSize += records[i].nproc;
      hosts += (hosts.empty() ? "" : ", ") + records[i].host;
    }
    // A round that holds the store's host uses that store, the job's own; without one (etcd, a
    // shared `dtrun store`) the workers get node 0's workers' store, which no other job shares.
    const bool storeHostInRound = std::any_of(order.begin(), order.end(),
                                              [&](std::size_t i) { return records[i].storeHost; });
    if (!order.empty() && !storeHostInRound && records[order.front()].workerStorePort != 0) {
      a.masterAddr = records[order.front()].host;
      a.masterPort = records[order.front()].workerStorePort;
    }
    std::vector<std::string> keys;
    std::vector<Bytes> values;
    std::set<std::size_t> chosen(order.begin(), order.end());
    int offset = 0;
    members_.clear();
    for (std::size_t rank = 0; rank < order.size(); ++rank) {
      const auto& arrival = arrived_[order[rank]];
      AssignValue v;
      v.assignment = a;
      v.assignment.nodeRank = static_cast<int>(rank);
      v.assignment.rankOffset = offset;
      offset += arrival.record.nproc;
      keys.push_back(keys_.assign(round_, arrival.slot));
      values.push_back(detail::encodeAssign(v));
      members_.push_back(arrival);
    }
    // Each node reads only its own small value: closing a round moves O(N) bytes, not O(N^2).
    for (std::size_t i = 0; i < arrived_.size(); ++i) {
      if (chosen.count(i) == 0) {
        AssignValue v;
        v.kind = AssignValue::Kind::kSpare;
        keys.push_back(keys_.assign(round_, arrived_[i].slot));
        values.push_back(detail::encodeAssign(v));
        spares_[arrived_[i].record.agentId] = arrived_[i].record;
      }
    }
    if (auto s = store_->multiSet(keys, values); !s.isOk()) {
      log::rdzv().error("keeper of job '{}': publishing round {}: {}", jobId_, round_, s.message());
      return;
    }
    phase_ = Phase::kRunning;
    const auto now = Clock::now();
    for (const auto& m : members_) {
      lastSeen_[m.record.agentId] = now;
      spares_.erase(m.record.agentId);
    }
    persist();
    log::rdzv().info("job '{}' round {} (attempt {}): {} node(s), world size {}, {} spare(s): {}",
                     jobId_, round_, attempt_, members_.size(), a.worldSize, spares_.size(),
                     hosts.size() > 400 ? hosts.substr(0, 400) + "..." : hosts);
  }

  // A node that arrives while the round runs waits for its end (as a spare); when the job is
  // below max, that end comes now.
  void onLateArrival(int slot, const NodeRecord& record) {
    spares_[record.agentId] = record;
    AssignValue v;
    v.kind = AssignValue::Kind::kSpare;
    static_cast<void>(store_->set(keys_.assign(round_, slot), detail::encodeAssign(v)));
    if (phase_ == Phase::kRunning && static_cast<int>(members_.size()) < settings_.maxNodes) {
      RoundEnd end;
      end.kind = RoundEnd::Kind::kMembership;
      end.message = "node " + record.host + " joined; rendezvous again with " +
                    std::to_string(members_.size() + 1) + " node(s)";
      endRound(end);
    }
  }

  void onDone(int slot) {
    if (phase_ != Phase::kRunning) {
      return;
    }
    done_.insert(slot);
    if (done_.size() >= members_.size()) {
      RoundEnd end;
      end.kind = RoundEnd::Kind::kSuccess;
      end.exitCode = 0;
      end.message = "every node's workers succeeded";
      endRound(end);
    }
  }

  // `why`: the leaving agent's reason ("" = none given), e.g. a failed health check.
  void onLeave(const std::string& agentId, const std::string& why = {}) {
    spares_.erase(agentId);
    if (phase_ == Phase::kExiting || phase_ == Phase::kClosed) {
      // Stopped by a signal once the job was over for it: it says no bye, its leave is one
      // (else the store's host waits out close_timeout for nodes that are gone: all agents
      // signalled at once, one leave closes the job and the others' leaves came after).
      onBye(agentId);
      return;
    }
    if (phase_ != Phase::kRunning) {
      return;
    }
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (members_[i].record.agentId == agentId) {
        lost_.insert(agentId);
        RoundEnd end;
        end.kind = RoundEnd::Kind::kMembership;
        end.message = describeNode(static_cast<int>(i), members_[i].record) + " left the job" +
                      (why.empty() ? "" : ": " + why);
        endRound(end);
        return;
      }
    }
  }

  // The backend saw `agentId` die (its lease expired): whatever round its last message named.
  void onLost(const std::string& agentId, const std::string& why) {
    spares_.erase(agentId);
    lastSeen_.erase(agentId);
    switch (phase_) {
      case Phase::kGathering: {
        // Arrived but gone: the round must not close with it.
        const auto gone = std::remove_if(arrived_.begin(), arrived_.end(), [&](const Member& a) {
          return a.record.agentId == agentId;
        });
        if (gone != arrived_.end()) {
          log::rdzv().warn("job '{}' round {}: {} is gone before the round closed: {}", jobId_,
                           round_, agentId, why);
          arrived_.erase(gone, arrived_.end());
          lastCall_.reset();
        }
        return;
      }
      case Phase::kRunning:
        for (std::size_t i = 0; i < members_.size(); ++i) {
          if (members_[i].record.agentId == agentId) {
            lost_.insert(agentId);
            RoundEnd end;
            end.kind = RoundEnd::Kind::kMembership;
            end.message = describeNode(static_cast<int>(i), members_[i].record) + " lost: " + why;
            endRound(end);
            return;
          }
        }
        return;
      case Phase::kExiting:
      case Phase::kClosed:
        onBye(agentId);  // gone for good: nothing more to wait for from it
        return;
    }
  }

  // ---- taking over ----

  static constexpr std::array kPhaseNames = {"gathering", "running", "exiting", "closed"};

  // Writes what a successor needs; a failure is logged, not fatal: the job goes on, only a
  // takeover would start from an older round.
  void persist() {
    detail::KeeperState k;
    k.round = round_;
    k.attempt = attempt_;
    k.noProgressStreak = noProgressStreak_;
    k.expected = expected_;
    k.phase = kPhaseNames.at(static_cast<std::size_t>(phase_));
    for (const auto& m : members_) {
      k.members.emplace_back(m.slot, m.record);
    }
    for (const auto& [id, record] : spares_) {
      k.spares.push_back(record);
    }
    k.closedBy = closedBy_;
    if (auto s = store_->set(keys_.keeperState(), detail::encodeKeeperState(k)); !s.isOk()) {
      log::rdzv().warn("keeper of job '{}': saving its state: {}", jobId_, s.message());
      if (s.code() == Errc::kDenied) {
        deposed_ = s;  // another keeper leads (etcd's fence): this one stops at once
      }
    }
  }

  // A keeper died; this one carries on from its last saved state. Joins and messages it had
  // taken from the inbox are gone, so the round it was in is ended (a membership change, not
  // charged) and every node joins the next one, unless the lost keeper's node was not a member
  // of a running round: then nothing restarts.
  Status resume(const detail::KeeperState& k) {
    round_ = k.round;
    attempt_ = k.attempt;
    noProgressStreak_ = k.noProgressStreak;
    expected_ = k.expected;
    closedBy_ = k.closedBy;
    for (const auto& record : k.spares) {
      spares_[record.agentId] = record;
    }
    members_.clear();
    for (const auto& [slot, record] : k.members) {
      members_.push_back({slot, record});
    }
    const auto* phase = std::find(kPhaseNames.begin(), kPhaseNames.end(), k.phase);
    phase_ = phase == kPhaseNames.end() ? Phase::kGathering
                                        : static_cast<Phase>(phase - kPhaseNames.begin());
    opened_ = Clock::now();
    lastStatus_ = opened_;
    closeUntil_ = opened_ + settings_.closeTimeout;
    for (const auto& m : members_) {
      lastSeen_[m.record.agentId] = opened_;
    }
    std::set<std::string> alive;
    if (options_.aliveAgents) {
      DTRUN_ASSIGN_OR_RETURN(auto ids, options_.aliveAgents());
      alive.insert(ids.begin(), ids.end());
      for (auto it = spares_.begin(); it != spares_.end();) {
        it = alive.count(it->first) != 0 ? std::next(it) : spares_.erase(it);
      }
    }
    const auto isLost = [&](const std::string& id) {
      return options_.aliveAgents && alive.count(id) == 0;
    };
    log::rdzv().warn("keeper of job '{}': taking over in round {} ({}), attempt {}", jobId_, round_,
                     k.phase, attempt_);
    switch (phase_) {
      case Phase::kGathering:
        return restartGathering("the keeper was lost while the round was gathering");
      case Phase::kRunning: {
        DTRUN_ASSIGN_OR_RETURN(auto end, store_->tryGet(keys_.end(round_)));
        if (end) {  // it ended while no keeper was there: act on it now
          onRoundEnded(detail::decodeEnd(*end).value_or(RoundEnd{}));
          return Status::ok();
        }
        std::string lostNames;
        for (std::size_t i = 0; i < members_.size(); ++i) {
          if (isLost(members_[i].record.agentId)) {
            lost_.insert(members_[i].record.agentId);
            lostNames += (lostNames.empty() ? "" : ", ") +
                         describeNode(static_cast<int>(i), members_[i].record);
          }
        }
        if (!lostNames.empty()) {
          RoundEnd lostEnd;
          lostEnd.kind = RoundEnd::Kind::kMembership;
          lostEnd.message = lostNames + " lost, with the job's keeper; a new keeper took over";
          endRound(lostEnd);
        }
        return Status::ok();
      }
      case Phase::kExiting:
      case Phase::kClosed:
        // Byes it had taken are gone: the nodes that exited since are gone from the leases.
        for (const auto& m : members_) {
          if (isLost(m.record.agentId)) {
            byes_.insert(m.record.agentId);
          }
        }
        if (phase_ == Phase::kExiting && membersGone()) {
          finish("every node passed the exit barrier (seen by a new keeper)");
        }
        return Status::ok();
    }
    return Status::ok();
  }

  // The lost keeper's round was still gathering: its arrivals (taken from the inbox) are gone.
  // Every node that took a slot is told to wait as a spare for the round's end, which comes at
  // once; all of them join the next round, which this keeper gathers.
  Status restartGathering(const std::string& why) {
    DTRUN_ASSIGN_OR_RETURN(auto slots, store_->add(keys_.arrivals(round_), 0));
    AssignValue spare;
    spare.kind = AssignValue::Kind::kSpare;
    for (std::int64_t slot = 0; slot < slots; ++slot) {
      const auto key = keys_.assign(round_, static_cast<int>(slot));
      DTRUN_TRY(store_->compareSet(key, "", detail::encodeAssign(spare)).status());
    }
    RoundEnd end;
    end.kind = RoundEnd::Kind::kMembership;
    end.message = why;
    DTRUN_TRY(store_->compareSet(keys_.end(round_), "", detail::encodeEnd(end)).status());
    if (!openRound(round_ + 1)) {
      return Status::connection("keeper of job '" + jobId_ + "': cannot open round " +
                                std::to_string(round_ + 1));
    }
    return Status::ok();
  }

  // Writes `end` unless the round already has one (a failing agent writes its own) and acts on
  // the end that holds.
  void endRound(const RoundEnd& end) {
    auto held = store_->compareSet(keys_.end(round_), "", detail::encodeEnd(end));
    if (!held.isOk()) {
      log::rdzv().error("keeper of job '{}': ending round {}: {}", jobId_, round_,
                        held.status().message());
      return;
    }
    onRoundEnded(detail::decodeEnd(held.value()).value_or(end));
  }

  void onRoundEnded(const RoundEnd& end) {
    if (phase_ != Phase::kRunning) {
      return;
    }
    log::rdzv().info("job '{}' round {} ended: {}", jobId_, round_, end.message);
    if (end.kind == RoundEnd::Kind::kSuccess) {
      phase_ = Phase::kExiting;
      closeUntil_ = Clock::now() + settings_.closeTimeout;
      persist();
      return;
    }
    // Who is expected in the next round: this round's members that are still alive, and spares.
    int alive = 0;
    std::string lostNames;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (lost_.count(members_[i].record.agentId) != 0) {
        lostNames +=
            (lostNames.empty() ? "" : ", ") + describeNode(static_cast<int>(i), members_[i].record);
      } else {
        ++alive;
      }
    }
    for (const auto& id : lost_) {
      lastSeen_.erase(id);
    }
    lost_.clear();
    const int available = alive + static_cast<int>(spares_.size());
    expected_ = std::min(available, settings_.maxNodes);
    if (end.kind == RoundEnd::Kind::kFailure) {
      noProgressStreak_ = end.progressed ? 0 : noProgressStreak_ + 1;
      const bool crashLoop =
          settings_.maxNoProgress > 0 && noProgressStreak_ >= settings_.maxNoProgress;
      if (end.noRestart || crashLoop || attempt_ >= settings_.maxRestarts) {
        closedBy_ = end;
        closedBy_->kind = RoundEnd::Kind::kClosed;
        closedBy_->message =
            end.message + "; " +
            (end.noRestart ? std::string("the failed rank asked not to be restarted")
             : crashLoop
                 ? std::to_string(noProgressStreak_) +
                       " attempts in a row made no progress (max_no_progress=" +
                       std::to_string(settings_.maxNoProgress) + ")"
                 : "no restarts left (max_restarts=" + std::to_string(settings_.maxRestarts) + ")");
        if (crashLoop && !end.noRestart) {
          closedBy_->exitCode = kExitNoProgress;
        }
      } else {
        ++attempt_;
      }
    } else if (available < settings_.minNodes) {
      closedBy_ = RoundEnd{RoundEnd::Kind::kClosed,
                           "only " + std::to_string(available) + " node(s) left, below the " +
                               std::to_string(settings_.minNodes) + " required (--nnodes): lost " +
                               (lostNames.empty() ? std::string("none") : lostNames),
                           "", 1};
      expected_ = available;
    }
    if (closedBy_) {
      log::rdzv().warn("job '{}' is over: {}", jobId_, closedBy_->message);
    }
    static_cast<void>(openRound(round_ + 1));
  }

  // ---- time ----

  // A keeper that did not run saw no heartbeat meanwhile, through no fault of the nodes: the
  // silence it did not watch is not theirs (issue 34: a 5 s SIGSTOP of the store's host made it
  // declare every node dead, its own included). Every clock it judges by moves on by the gap.
  void forgiveOwnStall(Clock::duration overrun) {
    if (overrun <= kStallSlack) {
      return;
    }
    for (auto& [id, seen] : lastSeen_) {
      seen += overrun;
    }
    opened_ += overrun;
    if (lastCall_) {
      *lastCall_ += overrun;
    }
    closeUntil_ += overrun;
    log::rdzv().warn(
        "keeper of job '{}' did not run for {}: nodes are judged from now on, not by that gap",
        jobId_, seconds(std::chrono::duration_cast<milliseconds>(overrun)));
  }

  [[nodiscard]] Clock::time_point nextDeadline() const {
    auto next = Clock::now() + kPopSlice;
    if (lastCall_ && phase_ == Phase::kGathering) {
      next = std::min(next, *lastCall_);
    }
    return next;
  }

  void checkDeadlines(Clock::time_point now) {
    switch (phase_) {
      case Phase::kGathering:
        if (!arrived_.empty()) {
          considerClosing(now);
        }
        if (phase_ == Phase::kGathering) {
          reportGathering(now);
        }
        return;
      case Phase::kRunning:
        checkHeartbeats(now);
        return;
      case Phase::kExiting:
      case Phase::kClosed:
        if (now >= closeUntil_) {
          finish(phase_ == Phase::kExiting ? "exit barrier: close timeout passed"
                                           : "close timeout passed");
        }
        return;
    }
  }

  void reportGathering(Clock::time_point now) {
    if (now - lastStatus_ < kStatusEvery) {
      return;
    }
    lastStatus_ = now;
    std::string names;
    for (const auto& a : arrived_) {
      names += (names.empty() ? "" : ", ") + a.record.host;
    }
    const int need = std::max(settings_.minNodes, std::min(expected_, settings_.maxNodes));
    const std::string line = "round " + std::to_string(round_) + ": waiting for " +
                             std::to_string(need - static_cast<int>(arrived_.size())) + " of " +
                             std::to_string(need) + " nodes (" + std::to_string(arrived_.size()) +
                             " arrived" + (names.empty() ? "" : ": " + names) + ")";
    static_cast<void>(store_->set(keys_.status(round_), line));
    log::rdzv().info("job '{}' {}", jobId_, line);
  }

  void checkHeartbeats(Clock::time_point now) {
    std::string silent;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const auto& id = members_[i].record.agentId;
      const auto it = lastSeen_.find(id);
      const auto quiet = std::chrono::duration_cast<milliseconds>(
          now - (it == lastSeen_.end() ? opened_ : it->second));
      if (quiet > settings_.deadAfter()) {
        lost_.insert(id);
        silent += (silent.empty() ? "" : ", ") +
                  describeNode(static_cast<int>(i), members_[i].record) +
                  " lost: no heartbeat for " + seconds(quiet);
      }
    }
    for (auto it = spares_.begin(); it != spares_.end();) {
      const auto seen = lastSeen_.find(it->first);
      if (seen != lastSeen_.end() && now - seen->second > settings_.deadAfter()) {
        it = spares_.erase(it);
      } else {
        ++it;
      }
    }
    if (!silent.empty()) {
      RoundEnd end;
      end.kind = RoundEnd::Kind::kMembership;
      end.message = silent;
      endRound(end);
    }
  }

  void finish(const std::string& why) {
    if (finished_) {
      return;  // a later bye of the same batch: the job is done once
    }
    log::rdzv().info("keeper of job '{}' done: {}", jobId_, why);
    static_cast<void>(store_->set(keys_.finished(), why));
    finished_ = true;
  }

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

class ThreadedKeeperService final : public KeeperService {
 public:
  ThreadedKeeperService(std::string host, std::uint16_t port, std::string token)
      : host_(std::move(host)), port_(port), token_(std::move(token)) {}
  ThreadedKeeperService(const ThreadedKeeperService&) = delete;
  ThreadedKeeperService& operator=(const ThreadedKeeperService&) = delete;
  ThreadedKeeperService(ThreadedKeeperService&&) = delete;
  ThreadedKeeperService& operator=(ThreadedKeeperService&&) = delete;
  ~ThreadedKeeperService() override {
    stopping_ = true;
    if (listener_.joinable()) {
      listener_.join();
    }
    const std::lock_guard lock(mutex_);
    for (auto& t : keepers_) {
      t.join();
    }
  }

  Status start() {
    DTRUN_ASSIGN_OR_RETURN(auto store, connect());
    listener_ = std::thread([this, s = std::move(store)]() mutable { listen(*s); });
    return Status::ok();
  }

 private:
  [[nodiscard]] Result<std::unique_ptr<Store>> connect() const {
    ClientOptions options;
    options.host = host_;
    options.port = port_;
    options.timeout = std::chrono::seconds(30);
    options.token = token_;
    return connectStore(options);
  }

  void listen(Store& store) {
    std::set<std::string> started;
    while (!stopping_.load()) {
      auto job = store.queuePop(detail::kKeeperRequests, kPopSlice);
      if (!job.isOk()) {
        if (job.status().code() != Errc::kTimeout) {
          log::rdzv().error("keeper service: {}", job.status().message());
          return;
        }
        continue;
      }
      if (!started.insert(job.value()).second) {
        continue;
      }
      const RoundKeys keys(job.value());
      auto text = store.get(keys.keeper());
      const auto settings = text.isOk() ? detail::decodeSettings(text.value()) : std::nullopt;
      auto keeperStore = connect();
      if (!settings || !keeperStore.isOk()) {
        log::rdzv().error("keeper service: job '{}' has no valid settings", job.value());
        continue;
      }
      const std::lock_guard lock(mutex_);
      keepers_.emplace_back([this, jobId = job.value(), settings = *settings,
                             s = std::move(keeperStore).value()]() mutable {
        if (auto s2 = Keeper(std::move(s), jobId, settings, stopping_).run(); !s2.isOk()) {
          log::rdzv().error("keeper of job '{}': {}", jobId, s2.message());
        }
      });
    }
  }

  std::string host_;
  std::uint16_t port_;
  std::string token_;
  std::atomic<bool> stopping_{false};
  std::thread listener_;
  std::mutex mutex_;
  std::vector<std::thread> keepers_;
};

}  // namespace

Status runKeeper(std::unique_ptr<Store> store, const std::string& jobId,
                 const KeeperOptions& options, const std::atomic<bool>& stopping) {
  // The job's first agent publishes the settings as it connects: wait for them in slices.
  const RoundKeys keys(jobId);
  const std::vector<std::string> settingsKey{keys.keeper()};
  for (;;) {
    if (stopping.load()) {
      return Status::error(Errc::kCancelled, "keeper of job '" + jobId + "': stopped");
    }
    auto s = store->wait(settingsKey, kPopSlice);
    if (s.isOk()) {
      break;
    }
    if (s.code() != Errc::kTimeout) {
      return s;
    }
  }
  DTRUN_ASSIGN_OR_RETURN(auto text, store->get(keys.keeper()));
  const auto settings = detail::decodeSettings(text);
  if (!settings) {
    return Status::protocol("keeper of job '" + jobId + "': malformed settings '" +
                            text.substr(0, 80) + "'");
  }
  return Keeper(std::move(store), jobId, *settings, stopping, options).run();
}

Status reportLost(Store& store, const std::string& jobId, const std::string& agentId,
                  const std::string& why) {
  return store.queuePush(RoundKeys(jobId).inbox(),
                         detail::encodeMessage(KeeperMessage{"lost", 0, -1, agentId, why}));
}

Result<std::unique_ptr<KeeperService>> KeeperService::start(std::uint16_t storePort,
                                                            const std::string& token,
                                                            const std::string& storeHost) {
  auto service = std::make_unique<ThreadedKeeperService>(storeHost, storePort, token);
  DTRUN_TRY(service->start());
  return std::unique_ptr<KeeperService>(std::move(service));
}

}  // namespace dtrun::rdzv
