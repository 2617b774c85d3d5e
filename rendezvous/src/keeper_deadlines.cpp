// The keeper's clock: its own stalls forgiven, the last call, the join and close timeouts,
// heartbeats and the job's end (keeper.h).
#include <algorithm>

#include "keeper.h"
#include "log.h"

namespace dtrun::rdzv::detail {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kStatusEvery{5000};
// Longer than this beyond its pop's wait between two looks at the clock, and the keeper itself
// did not run (its process stopped, its host swapping, a store call stuck).
constexpr milliseconds kStallSlack{1000};

}  // namespace

void Keeper::forgiveOwnStall(Clock::duration overrun) {
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

Keeper::Clock::time_point Keeper::nextDeadline() const {
  auto next = Clock::now() + kPopSlice;
  if (lastCall_ && phase_ == Phase::kGathering) {
    next = std::min(next, *lastCall_);
  }
  return next;
}

void Keeper::checkDeadlines(Clock::time_point now) {
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

void Keeper::reportGathering(Clock::time_point now) {
  if (now - lastStatus_ < kStatusEvery) {
    return;
  }
  lastStatus_ = now;
  // A few names say who is there; thousands would make the line (and a timeout's error, which
  // quotes it) unreadable.
  constexpr std::size_t kNamed = 8;
  std::string names;
  for (std::size_t i = 0; i < std::min(arrived_.size(), kNamed); ++i) {
    names += (names.empty() ? "" : ", ") + arrived_[i].record.host;
  }
  if (arrived_.size() > kNamed) {
    names += " and " + std::to_string(arrived_.size() - kNamed) + " more";
  }
  const int need = std::max(settings_.minNodes, std::min(expected_, settings_.maxNodes));
  const std::string line = "round " + std::to_string(round_) + ": waiting for " +
                           std::to_string(need - static_cast<int>(arrived_.size())) + " of " +
                           std::to_string(need) + " nodes (" + std::to_string(arrived_.size()) +
                           " arrived" + (names.empty() ? "" : ": " + names) + ")";
  static_cast<void>(store_->set(keys_.status(round_), line));
  log::rdzv().info("job '{}' {}", jobId_, line);
}

void Keeper::checkHeartbeats(Clock::time_point now) {
  std::string silent;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const auto& id = members_[i].record.agentId;
    const auto it = lastSeen_.find(id);
    const auto quiet = std::chrono::duration_cast<milliseconds>(
        now - (it == lastSeen_.end() ? opened_ : it->second));
    if (quiet > settings_.deadAfter()) {
      lost_.insert(id);
      silent += (silent.empty() ? "" : ", ") +
                describeNode(static_cast<int>(i), members_[i].record) + " lost: no heartbeat for " +
                seconds(quiet);
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

void Keeper::finish(const std::string& why) {
  if (finished_) {
    return;  // a later bye of the same batch: the job is done once
  }
  log::rdzv().info("keeper of job '{}' done: {}", jobId_, why);
  static_cast<void>(store_->set(keys_.finished(), why));
  finished_ = true;
}

}  // namespace dtrun::rdzv::detail
