// A node's side of the round protocol: one connection for waiting calls, one for notifications.
#include <algorithm>
#include <charconv>
#include <mutex>
#include <optional>
#include <thread>

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

// Waits are cut into slices so that `cancel` is seen; the event itself still arrives at once.
// Every slice that expires costs a cancel and a new wait, so a big job (whose rounds take longer
// to close, and whose N nodes would all re-wait together) gets longer slices: 1 ms per node.
constexpr milliseconds kWaitSlice{1000};
constexpr milliseconds kSlicePerNode{1};
constexpr milliseconds kLongestSlice{5000};
constexpr milliseconds kProgressEvery{5000};

class StoreRoundMember final : public RoundMember {
 public:
  StoreRoundMember(std::unique_ptr<Store> waiter, std::unique_ptr<Store> notifier,
                   const std::string& jobId, const RoundSettings& settings, NodeRecord self)
      : waiter_(std::move(waiter)),
        notifier_(std::move(notifier)),
        keys_(jobId),
        jobId_(jobId),
        settings_(settings),
        self_(std::move(self)),
        record_(detail::encodeRecord(self_)),
        slice_(std::clamp(kSlicePerNode * settings.maxNodes, kWaitSlice, kLongestSlice)) {}

  // Publishes the settings unless the job has them, and asks for a keeper when this call was
  // the one that published them.
  // A job that finished on a long-lived store (`dtrun store`) keeps its keys: a rerun under the
  // same id would wait for a keeper that never comes (torchrun: RendezvousClosedError).
  Status requestKeeper(bool askKeeperService) {
    DTRUN_ASSIGN_OR_RETURN(auto over, waiter_->tryGet(keys_.finished()));
    if (over) {
      return Status::error(Errc::kDenied, "job '" + jobId_ + "' already finished on this store (" +
                                              over->substr(0, 120) + "): use a new --rdzv_id");
    }
    const std::string mine = detail::encodeSettings(settings_);
    DTRUN_ASSIGN_OR_RETURN(auto held, waiter_->compareSet(keys_.keeper(), "", mine));
    if (held == mine) {
      return askKeeperService ? waiter_->queuePush(detail::kKeeperRequests, jobId_) : Status::ok();
    }
    if (const auto theirs = detail::decodeSettings(held);
        theirs &&
        (theirs->minNodes != settings_.minNodes || theirs->maxNodes != settings_.maxNodes)) {
      log::rdzv().warn("job '{}' runs with --nnodes={}:{} (set by its first agent), not {}:{}",
                       jobId_, theirs->minNodes, theirs->maxNodes, settings_.minNodes,
                       settings_.maxNodes);
    }
    return Status::ok();
  }

  Result<JoinOutcome> join(const std::atomic<bool>& cancel,
                           const std::function<void(const std::string&)>& progress) override {
    const auto deadline = Clock::now() + settings_.joinTimeout;
    // The keeper publishes the round key once, before anyone joins: usually one read is enough.
    DTRUN_ASSIGN_OR_RETURN(auto present, waiter_->tryGet(keys_.round()));
    DTRUN_ASSIGN_OR_RETURN(auto roundText,
                           present ? Result<std::optional<Bytes>>(std::move(present))
                                   : waitAndGet(keys_.round(), deadline, cancel, progress, -1));
    if (!roundText) {
      return finishedMeanwhile();
    }
    // Not below the round after the last one this node saw end: the keeper may not have
    // opened it yet (it takes the early join when it does).
    int published = 0;
    const auto& text = *roundText;
    if (std::from_chars(text.data(), text.data() + text.size(), published).ec != std::errc()) {
      return Status::protocol("job '" + jobId_ + "': the store's round key holds '" +
                              text.substr(0, 40) + "', not a number");
    }
    int r = std::max(published, nextRound());
    for (;;) {
      DTRUN_ASSIGN_OR_RETURN(auto slot, waiter_->takeTicket(keys_.arrivals(r)));
      const int mySlot = static_cast<int>(slot - 1);
      DTRUN_TRY(waiter_->queuePush(keys_.inbox(), message("join", r, mySlot, record_)));
      {
        const std::lock_guard lock(stateMutex_);
        round_ = r;
        slot_ = mySlot;
      }
      DTRUN_ASSIGN_OR_RETURN(auto assigned,
                             waitAndGet(keys_.assign(r, mySlot), deadline, cancel, progress, r));
      if (!assigned) {
        return finishedMeanwhile();
      }
      const auto value = detail::decodeAssign(*assigned);
      if (!value) {
        return Status::protocol("rendezvous of job '" + jobId_ + "': malformed assignment '" +
                                assigned->substr(0, 80) + "'");
      }
      if (value->kind == AssignValue::Kind::kMember) {
        return JoinOutcome{false, value->assignment, {}};
      }
      if (value->kind == AssignValue::Kind::kClosed) {
        return JoinOutcome{true, {}, value->closedBy};
      }
      // A spare, or a late arrival the keeper moves into the next round: wait for this one to
      // end (spares wait as long as the job runs), then join the next.
      log::rdzv().info(
          "job '{}' round {} has no place for this node now (it is full, or already runs): "
          "waiting as a spare for its end",
          jobId_, r);
      DTRUN_ASSIGN_OR_RETURN(auto end, waitEnd(cancel));
      if (end.kind == RoundEnd::Kind::kSuccess) {
        return JoinOutcome{true, {}, end};  // the job succeeded without this spare
      }
      r += 1;
    }
  }

  Result<RoundEnd> waitEnd(const std::atomic<bool>& cancel) override {
    const int r = currentRound();
    const std::vector<std::string> keys{keys_.end(r)};
    for (;;) {
      if (cancel.load()) {
        return Status::error(Errc::kCancelled,
                             "waiting for the end of round " + std::to_string(r) + ": cancelled");
      }
      const auto s = waiter_->wait(keys, slice_);
      if (s.code() == Errc::kTimeout) {
        continue;
      }
      DTRUN_TRY(s);
      DTRUN_ASSIGN_OR_RETURN(auto text, waiter_->get(keys_.end(r)));
      if (auto end = detail::decodeEnd(text)) {
        sawEnd(r);
        return *end;
      }
      return Status::protocol("round " + std::to_string(r) + " of job '" + jobId_ +
                              "' ended with a malformed value");
    }
  }

  Result<RoundEnd> endRound(const RoundEnd& end) override {
    const std::lock_guard lock(notifyMutex_);
    const int r = currentRound();
    DTRUN_ASSIGN_OR_RETURN(auto held,
                           notifier_->compareSet(keys_.end(r), "", detail::encodeEnd(end)));
    sawEnd(r);
    if (end.kind == RoundEnd::Kind::kFailure) {
      DTRUN_TRY(notifier_->queuePush(keys_.inbox(), message("fail", r, currentSlot())));
    }
    return detail::decodeEnd(held).value_or(end);
  }

  Status heartbeat() override { return notify("hb"); }
  Status done() override { return notify("done"); }
  Status leave(const std::string& why) override {
    log::rdzv().info("job '{}': leaving ({})", jobId_, why);
    return notify("leave", why);
  }
  Status bye() override { return notify("bye"); }

  Status waitFinished(milliseconds timeout) override {
    return waiter_->wait(std::vector<std::string>{keys_.finished()}, timeout);
  }

 private:
  [[nodiscard]] std::string message(const char* verb, int r, int slot,
                                    const std::string& payload = {}) const {
    return detail::encodeMessage(KeeperMessage{verb, r, slot, self_.agentId, payload});
  }

  Status notify(const char* verb, const std::string& payload = {}) {
    const std::lock_guard lock(notifyMutex_);
    return notifier_->queuePush(keys_.inbox(),
                                message(verb, currentRound(), currentSlot(), payload));
  }

  int currentRound() {
    const std::lock_guard lock(stateMutex_);
    return round_;
  }
  int nextRound() {
    const std::lock_guard lock(stateMutex_);
    return nextRound_;
  }
  void sawEnd(int r) {
    const std::lock_guard lock(stateMutex_);
    nextRound_ = std::max(nextRound_, r + 1);
  }
  int currentSlot() {
    const std::lock_guard lock(stateMutex_);
    return slot_;
  }

  // The outcome of a join that found the job finished while it waited: over, as every agent
  // that the keeper told so learns it, with the keeper's own last word.
  Result<JoinOutcome> finishedMeanwhile() {
    DTRUN_ASSIGN_OR_RETURN(auto why, waiter_->tryGet(keys_.finished()));
    RoundEnd end;
    end.kind = RoundEnd::Kind::kClosed;
    end.message = "the job finished while this node joined (its keeper: " +
                  why.value_or("done").substr(0, 200) + ")";
    return JoinOutcome{true, {}, end};
  }

  // The keeper's latest "waiting for ..." line for round r, or "" (without waiting for one).
  std::string statusLine(int r) {
    const std::vector<std::string> keys{keys_.status(r)};
    auto present = waiter_->check(keys);
    if (!present.isOk() || !present.value()) {
      return {};
    }
    auto line = waiter_->get(keys_.status(r));
    return line.isOk() ? line.value() : std::string();
  }

  // Waits for `key` until `deadline` in slices, reporting the keeper's status line of round
  // `r` (when r >= 0) every few seconds; then returns its value, or nullopt once the job has
  // finished: its keeper is gone and would never answer (a node it had called lost, joining
  // again as the job closed, waited for join_timeout: found by the loaded flake table).
  Result<std::optional<Bytes>> waitAndGet(const std::string& key, Clock::time_point deadline,
                                          const std::atomic<bool>& cancel,
                                          const std::function<void(const std::string&)>& progress,
                                          int r) {
    auto nextProgress = Clock::now() + kProgressEvery;
    for (;;) {
      if (cancel.load()) {
        return Status::error(Errc::kCancelled, "rendezvous of job '" + jobId_ + "': cancelled");
      }
      const auto now = Clock::now();
      if (now >= deadline) {
        const std::string last = r >= 0 ? statusLine(r) : std::string();
        return Status::timeout(
            "rendezvous of job '" + jobId_ + "' on " + waiter_->peer() + ": not complete after " +
            std::to_string(settings_.joinTimeout.count() / 1000) + " s (join_timeout)" +
            (last.empty() ? std::string(r < 0 ? "; no dtrun keeper answered: is the store a dtrun "
                                                "agent or `dtrun store`?"
                                              : "")
                          : "; " + last));
      }
      const auto slice = std::min(slice_, std::chrono::duration_cast<milliseconds>(deadline - now));
      auto got = waiter_->waitGet(key, std::max(slice, milliseconds(1)));
      if (got.isOk()) {
        if (got.value()) {
          return std::move(got.value());
        }
        continue;  // deleted between the wait and the read: wait again
      }
      if (got.status().code() != Errc::kTimeout) {
        return got.status();
      }
      DTRUN_ASSIGN_OR_RETURN(auto over, waiter_->tryGet(keys_.finished()));
      if (over) {
        return std::optional<Bytes>();
      }
      if (r >= 0 && Clock::now() >= nextProgress && progress) {
        nextProgress = Clock::now() + kProgressEvery;
        if (const auto line = statusLine(r); !line.empty()) {
          progress(line);
        }
      }
    }
  }

  std::unique_ptr<Store> waiter_;
  std::unique_ptr<Store> notifier_;
  RoundKeys keys_;
  std::string jobId_;
  RoundSettings settings_;
  NodeRecord self_;
  std::string record_;  // encodeRecord(self_), sent with every join
  milliseconds slice_;
  std::mutex notifyMutex_;
  std::mutex stateMutex_;
  int round_ = 0;
  int slot_ = -1;
  int nextRound_ = 0;
};

Result<std::unique_ptr<RoundMember>> makeMember(std::unique_ptr<Store> waiter,
                                                std::unique_ptr<Store> notifier,
                                                const std::string& jobId,
                                                const RoundSettings& settings, NodeRecord self,
                                                bool askKeeperService) {
  auto member = std::make_unique<StoreRoundMember>(std::move(waiter), std::move(notifier), jobId,
                                                   settings, std::move(self));
  DTRUN_TRY(member->requestKeeper(askKeeperService));
  return std::unique_ptr<RoundMember>(std::move(member));
}

}  // namespace

Result<std::unique_ptr<RoundMember>> RoundMember::connect(const ClientOptions& store,
                                                          const std::string& jobId,
                                                          const RoundSettings& settings,
                                                          NodeRecord self) {
  DTRUN_ASSIGN_OR_RETURN(auto waiter, connectStore(store));
  DTRUN_ASSIGN_OR_RETURN(auto notifier, connectStore(store));
  return create(std::move(waiter), std::move(notifier), jobId, settings, std::move(self));
}

Result<std::unique_ptr<RoundMember>> RoundMember::connect(const StoreFactory& store,
                                                          const std::string& jobId,
                                                          const RoundSettings& settings,
                                                          NodeRecord self, bool askKeeperService) {
  return connect(store, store, jobId, settings, std::move(self), askKeeperService);
}

Result<std::unique_ptr<RoundMember>> RoundMember::connect(const StoreFactory& waiters,
                                                          const StoreFactory& notifiers,
                                                          const std::string& jobId,
                                                          const RoundSettings& settings,
                                                          NodeRecord self, bool askKeeperService) {
  DTRUN_ASSIGN_OR_RETURN(auto waiter, waiters());
  DTRUN_ASSIGN_OR_RETURN(auto notifier, notifiers());
  return makeMember(std::move(waiter), std::move(notifier), jobId, settings, std::move(self),
                    askKeeperService);
}

Result<std::unique_ptr<RoundMember>> RoundMember::create(std::unique_ptr<Store> waiter,
                                                         std::unique_ptr<Store> notifier,
                                                         const std::string& jobId,
                                                         const RoundSettings& settings,
                                                         NodeRecord self) {
  return makeMember(std::move(waiter), std::move(notifier), jobId, settings, std::move(self), true);
}

}  // namespace dtrun::rdzv
