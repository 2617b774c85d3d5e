// The keeper's saved state, a successor's resumption from it, and a round's end (keeper.h).
#include <algorithm>
#include <utility>

#include "keeper.h"
#include "log.h"

namespace dtrun::rdzv::detail {

void Keeper::persist() {
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

Status Keeper::resume(const detail::KeeperState& k) {
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

Status Keeper::restartGathering(const std::string& why) {
  DTRUN_ASSIGN_OR_RETURN(auto slots, store_->ticketsTaken(keys_.arrivals(round_)));
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

void Keeper::endRound(const RoundEnd& end) {
  auto held = store_->compareSet(keys_.end(round_), "", detail::encodeEnd(end));
  if (!held.isOk()) {
    log::rdzv().error("keeper of job '{}': ending round {}: {}", jobId_, round_,
                      held.status().message());
    return;
  }
  onRoundEnded(detail::decodeEnd(held.value()).value_or(end));
}

void Keeper::onRoundEnded(const RoundEnd& end) {
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

}  // namespace dtrun::rdzv::detail
