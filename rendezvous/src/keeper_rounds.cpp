// The keeper's loop and its rounds: joins, closing a round, members that finish, leave or are
// lost (keeper.h).
#include <algorithm>
#include <utility>

#include "keeper.h"
#include "log.h"

namespace dtrun::rdzv::detail {
namespace {

using std::chrono::milliseconds;

// Messages taken from the inbox per pop: thousands of joins cost a few round trips, not one each.
constexpr std::size_t kPopBatch = 1024;

}  // namespace

Status Keeper::run() {
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
      log::rdzv().error("keeper of job '{}' lost its store: {}", jobId_, items.status().message());
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

bool Keeper::openRound(int r) {
  round_ = r;
  phase_ = closedBy_ ? Phase::kClosed : Phase::kGathering;
  arrived_.clear();
  arrivedByAgent_.clear();
  arrivedBySlot_.clear();
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

void Keeper::clearWorkerKeys() {
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

void Keeper::handle(const KeeperMessage& m) {
  if (m.verb == "batch") {  // a group relay's forwarded messages (dtrun/group_relay.h)
    const auto messages = detail::decodeBatch(m.payload);
    if (!messages) {
      log::rdzv().warn("keeper of job '{}': ignoring a malformed batch from {}", jobId_, m.agentId);
      return;
    }
    for (const auto& text : *messages) {
      if (auto inner = detail::decodeMessage(text); inner && inner->verb != "batch") {
        handle(*inner);
      }
    }
    return;
  }
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

void Keeper::onBye(const std::string& agentId) {
  byes_.insert(agentId);
  if (phase_ == Phase::kExiting && membersGone()) {
    finish("every node passed the exit barrier");
  } else if (phase_ == Phase::kClosed && byes_.size() >= static_cast<std::size_t>(expected_)) {
    finish("every node learned that the job is over");
  }
}

bool Keeper::membersGone() const {
  return std::all_of(members_.begin(), members_.end(),
                     [this](const Member& m) { return byes_.count(m.record.agentId) != 0; });
}

void Keeper::onJoin(const KeeperMessage& m) {
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
      arrive(slot, *record);
      considerClosing(Clock::now());
      return;
    case Phase::kRunning:
    case Phase::kExiting:
      onLateArrival(slot, *record);
      return;
  }
}

void Keeper::arrive(int slot, const NodeRecord& record) {
  // A join can come twice (a store request sent again after its answer was lost): a node
  // counts once, at its latest slot, and a slot belongs to one node (else both would take
  // the same assignment; an etcd transaction would also refuse the key twice, forever).
  const auto byAgent = arrivedByAgent_.find(record.agentId);
  const auto bySlot = arrivedBySlot_.find(slot);
  if (bySlot != arrivedBySlot_.end() &&
      (byAgent == arrivedByAgent_.end() || bySlot->second != byAgent->second)) {
    log::rdzv().error(
        "keeper of job '{}': round {} slot {} claimed by {} and {}: the second is not counted",
        jobId_, round_, slot, arrived_[bySlot->second].record.agentId, record.agentId);
  } else if (byAgent != arrivedByAgent_.end()) {
    Member& same = arrived_[byAgent->second];
    arrivedBySlot_.erase(same.slot);
    same = {slot, record};
    arrivedBySlot_[slot] = byAgent->second;
  } else {
    arrivedByAgent_[record.agentId] = arrived_.size();
    arrivedBySlot_[slot] = arrived_.size();
    arrived_.push_back({slot, record});
  }
}

void Keeper::considerClosing(Clock::time_point now) {
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

void Keeper::closeRound() {
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
  const bool storeHostInRound =
      std::any_of(order.begin(), order.end(), [&](std::size_t i) { return records[i].storeHost; });
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

void Keeper::onLateArrival(int slot, const NodeRecord& record) {
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

void Keeper::onDone(int slot) {
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

void Keeper::onLeave(const std::string& agentId, const std::string& why) {
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

void Keeper::onLost(const std::string& agentId, const std::string& why) {
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
        arrivedByAgent_.clear();
        arrivedBySlot_.clear();
        for (std::size_t i = 0; i < arrived_.size(); ++i) {
          arrivedByAgent_[arrived_[i].record.agentId] = i;
          arrivedBySlot_[arrived_[i].slot] = i;
        }
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

}  // namespace dtrun::rdzv::detail
