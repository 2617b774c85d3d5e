// An agent's lease, liveness key and candidacy for the keeper of an etcd-backed job. Three
// threads: one keeps the lease alive, one campaigns and (once elected) runs the keeper, one
// watches the other agents' liveness keys while this agent leads.
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "dtrun/etcd.h"
#include "dtrun/round.h"

#include "log.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;

// How long one watch blocks before the thread looks at its stop flag (the watch itself returns
// at once when something happens).
constexpr milliseconds kWatchSlice{1000};

class EtcdAgentPresence final : public EtcdPresence {
 public:
  EtcdAgentPresence(std::shared_ptr<EtcdClient> client, std::string prefix, std::string jobId,
                    std::string agentId, std::chrono::seconds ttl,
                    std::function<void(const Status&)> onLeaseLost)
      : client_(std::move(client)),
        prefix_(std::move(prefix)),
        jobId_(std::move(jobId)),
        agentId_(std::move(agentId)),
        ttl_(ttl),
        onLeaseLost_(std::move(onLeaseLost)),
        aliveDir_(prefix_ + "alive/"),
        leaderKey_(prefix_ + "keeper_leader") {}

  EtcdAgentPresence(const EtcdAgentPresence&) = delete;
  EtcdAgentPresence& operator=(const EtcdAgentPresence&) = delete;
  EtcdAgentPresence(EtcdAgentPresence&&) = delete;
  EtcdAgentPresence& operator=(EtcdAgentPresence&&) = delete;

  ~EtcdAgentPresence() override {
    stopThreads();
    if (lease_ != 0) {
      if (auto s = client_->revokeLease(lease_); !s.isOk()) {
        log::rdzv().debug("revoking this agent's etcd lease: {}", s.message());
        return;
      }
      try {
        removeKeysIfLast();
      } catch (...) {  // out of memory at exit: the job's keys stay, as before this cleanup
      }
    }
  }

  Status start() {
    DTRUN_ASSIGN_OR_RETURN(lease_, client_->grantLease(ttl_));
    DTRUN_ASSIGN_OR_RETURN(aliveRevision_, client_->put(aliveDir_ + agentId_, agentId_, lease_));
    std::int64_t fromRevision = 0;
    DTRUN_ASSIGN_OR_RETURN(const bool won, claim(fromRevision));
    leads_ = won;
    keepAlive_ = std::thread([this] { keepAliveLoop(); });
    campaign_ = std::thread([this, won, fromRevision] { campaignLoop(won, fromRevision); });
    return Status::ok();
  }

  [[nodiscard]] StoreFactory stores() const override { return storesThrough(client_); }

  [[nodiscard]] StoreFactory storesThrough(std::shared_ptr<EtcdClient> client) const override {
    // Fenced on this agent's liveness key: once its lease expired (paused, cut off) and the job
    // went on without it, it writes nothing more into the job (a stray message would outlive it).
    // The key also goes when the job's last agent removes the job's keys: the message names both,
    // as nothing is left to tell them apart.
    return
        [client = std::move(client), prefix = prefix_,
         fence = EtcdFence{aliveDir_ + agentId_, aliveRevision_,
                           "this agent's etcd liveness key is gone: its lease expired and the job "
                           "dropped it, or the job ended and its keys were removed"}] {
          return makeEtcdStore(client, prefix, fence);
        };
  }

  [[nodiscard]] bool leads() const override { return leads_.load(); }

  // The watcher first: deleting the liveness keys must not read as agents lost.
  Status removeJobKeys() override {
    stopThreads();
    return client_->erase(prefix_, true).status();
  }

 private:
  // Renews the lease three times per TTL, each renewal waiting a third of it at most (then the
  // next asks another member: one frozen or cut off holds a request); a renewal that fails is
  // retried at once, until the lease is really gone (etcd says so) or etcd is (no member
  // answered for the request timeout: while etcd is away it expires no lease, and a restarted
  // etcd renews them all).
  void keepAliveLoop() {
    const auto every = std::chrono::duration_cast<milliseconds>(ttl_) / 3;
    const auto giveUp = std::max<milliseconds>(ttl_, client_->requestTimeout());
    auto lastRenewed = std::chrono::steady_clock::now();
    auto next = every;
    bool warned = false;  // once per spell of failed renewals
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, next, [this] { return stopping_; })) {
      lock.unlock();
      const Status s = client_->keepAlive(lease_, every);
      const auto now = std::chrono::steady_clock::now();
      lock.lock();
      next = s.isOk() ? every : milliseconds(0);
      if (s.isOk()) {
        lastRenewed = now;
        warned = false;
        continue;
      }
      if (s.code() == Errc::kNotFound || now - lastRenewed > giveUp) {
        stopping_ = true;
        stopFlag_ = true;
        lock.unlock();
        log::rdzv().error("job '{}': this agent's etcd lease is gone: {}", jobId_, s.message());
        if (onLeaseLost_) {
          onLeaseLost_(Status::connection(
              s.code() == Errc::kNotFound
                  ? "this agent's etcd lease expired: " + s.message()
                  : "no etcd member renewed this agent's lease for " +
                        std::to_string(
                            std::chrono::duration_cast<std::chrono::seconds>(giveUp).count()) +
                        " s: " + s.message()));
        }
        return;
      }
      if (!warned) {
        warned = true;
        log::rdzv().warn("job '{}': renewing the etcd lease: {} (asking the next member)", jobId_,
                         s.message());
      }
    }
  }

  // The last agent out of a job removes what the job left in etcd. Usually the keeper's agent
  // did so after every node passed the exit barrier; but a keeper signalled away as the job
  // ended (over for want of its own node) leaves at once, and so do the others once they learn
  // the job is over: found by the fault campaign (agent-term of the keeper's node, --nnodes 3:3).
  void removeKeysIfLast() {
    const auto alive = client_->getPrefix(aliveDir_, 1, false, true);
    if (!alive.isOk() || alive.value().count != 0) {
      return;
    }
    if (auto s = client_->erase(prefix_, true).status(); !s.isOk()) {
      log::rdzv().debug("removing job '{}' from etcd as its last agent: {}", jobId_, s.message());
    }
  }

  void stopThreads() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
      stopFlag_ = true;
    }
    wake_.notify_all();
    for (auto* t : {&keepAlive_, &campaign_, &watcher_}) {
      if (t->joinable()) {
        t->join();
      }
    }
  }

  [[nodiscard]] bool stopping() {
    const std::lock_guard lock(mutex_);
    return stopping_;
  }

  // Creates the leader key with this agent's lease unless one exists: true when this agent
  // leads now. `fromRevision` gets the revision to watch the key from.
  Result<bool> claim(std::int64_t& fromRevision) {
    EtcdCompare absent;
    absent.key = leaderKey_;
    absent.target = EtcdCompare::Target::kCreateRevision;
    absent.number = 0;
    EtcdOp put;
    put.type = EtcdOp::Type::kPut;
    put.key = leaderKey_;
    put.value = agentId_;
    put.lease = lease_;
    EtcdOp read;
    read.key = leaderKey_;
    DTRUN_ASSIGN_OR_RETURN(auto txn, client_->txn({absent}, {put}, {read}));
    fromRevision = txn.revision + 1;
    if (txn.succeeded) {
      leaderRevision_ = txn.revision;  // the put's: the key's create revision
      return true;
    }
    // Ours already: a retried request whose first try had succeeded.
    const auto& held = txn.gets;
    if (!held.empty() && !held.front().empty() && held.front().front().value == agentId_) {
      leaderRevision_ = held.front().front().createRevision;
      return true;
    }
    return false;
  }

  // Whether the leader key is still the one this agent made: not after its lease lapsed (it was
  // paused, or cut off from etcd, longer than the TTL) and another agent took over.
  bool stillLeads() {
    auto held = client_->get(leaderKey_);
    return held.isOk() && held.value() && held.value()->createRevision == leaderRevision_;
  }

  // The first claim was made by start(); until this agent leads, it waits for the leader key to
  // go (its owner's lease ended) and claims it again.
  void campaignLoop(bool won, std::int64_t fromRevision) {
    while (!won && !stopping()) {
      waitForVacancy(fromRevision);
      auto claimed = claim(fromRevision);
      if (!claimed.isOk()) {
        log::rdzv().warn("job '{}': campaigning for the keeper: {}", jobId_,
                         claimed.status().message());
        waitABit();
        continue;
      }
      won = claimed.value();
    }
    if (won && !stopping()) {
      lead();
    }
  }

  void waitForVacancy(std::int64_t fromRevision) {
    while (!stopping()) {
      auto events = client_->watch(leaderKey_, false, fromRevision, kWatchSlice, &stopFlag_);
      if (!events.isOk()) {
        waitABit();
        return;
      }
      for (const auto& e : events.value()) {
        if (e.type == EtcdEvent::Type::kDelete) {
          return;
        }
        fromRevision = e.kv.modRevision + 1;
      }
    }
  }

  // Runs the keeper until the job is over. A keeper that lost etcd for longer than its request
  // timeout starts again from the state it saved, as a successor would, if it still leads. Its
  // writes are fenced on the leader key it made: once another agent leads, they change nothing.
  void lead() {
    leads_ = true;
    log::rdzv().info("job '{}': this agent ({}) runs the keeper", jobId_, agentId_);
    watcher_ = std::thread([this] { watchLiveness(); });
    KeeperOptions options;
    options.aliveAgents = [this] { return aliveAgents(); };
    while (!stopping()) {
      auto store = makeEtcdStore(client_, prefix_, EtcdFence{leaderKey_, leaderRevision_});
      Status s = store.isOk() ? runKeeper(std::move(store).value(), jobId_, options, stopFlag_)
                              : store.status();
      if (s.isOk() || s.code() == Errc::kCancelled) {
        return;
      }
      if (s.code() == Errc::kDenied || !stillLeads()) {
        leads_ = false;
        log::rdzv().error("job '{}': this agent no longer runs the keeper: {}", jobId_,
                          s.message());
        return;
      }
      log::rdzv().error("job '{}': the keeper stopped ({}); starting it again", jobId_,
                        s.message());
      waitABit();
    }
  }

  Result<std::vector<std::string>> aliveAgents() {
    DTRUN_ASSIGN_OR_RETURN(auto range, client_->getPrefix(aliveDir_, 0, false, true));
    std::vector<std::string> ids;
    ids.reserve(range.kvs.size());
    for (const auto& kv : range.kvs) {
      ids.push_back(kv.key.substr(aliveDir_.size()));
    }
    return ids;
  }

  // While this agent leads: every liveness key that vanishes is an agent gone. Told through a
  // store fenced as the keeper's: a deposed keeper (paused, cut off) reports nobody, or its
  // reports would outlive the job in its inbox.
  void watchLiveness() {
    auto store = makeEtcdStore(client_, prefix_, EtcdFence{leaderKey_, leaderRevision_});
    if (!store.isOk()) {
      log::rdzv().error("job '{}': watching the agents' leases: {}", jobId_,
                        store.status().message());
      return;
    }
    std::int64_t from = 0;
    while (!stopping()) {
      if (from == 0) {
        auto range = client_->getPrefix(aliveDir_, 1, false, true);
        if (!range.isOk()) {
          waitABit();
          continue;
        }
        from = range.value().revision + 1;
      }
      auto events = client_->watch(aliveDir_, true, from, kWatchSlice, &stopFlag_);
      if (!events.isOk()) {
        from = 0;  // e.g. compacted: start again from now (the keeper's heartbeats cover gaps)
        waitABit();
        continue;
      }
      for (const auto& e : events.value()) {
        from = std::max(from, e.kv.modRevision + 1);
        if (e.type != EtcdEvent::Type::kDelete) {
          continue;
        }
        const auto id = e.kv.key.substr(aliveDir_.size());
        const std::string why = "its etcd lease ended (the agent exited or its node is lost)";
        const auto s = reportLost(*store.value(), jobId_, id, why);
        if (s.code() == Errc::kDenied) {
          log::rdzv().info("job '{}': not watching the agents' leases any more: {}", jobId_,
                           s.message());
          return;
        }
        if (!s.isOk()) {
          log::rdzv().warn("job '{}': telling the keeper that {} is gone: {}", jobId_, id,
                           s.message());
        }
      }
    }
  }

  void waitABit() {
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, milliseconds(200), [this] { return stopping_; });
  }

  std::shared_ptr<EtcdClient> client_;
  std::string prefix_;
  std::string jobId_;
  std::string agentId_;
  std::chrono::seconds ttl_;
  std::function<void(const Status&)> onLeaseLost_;
  std::string aliveDir_;
  std::string leaderKey_;
  std::int64_t lease_ = 0;
  std::int64_t leaderRevision_ = 0;  // the create revision of the leader key this agent made
  // The create revision of its liveness key (a new key: the put's revision).
  std::int64_t aliveRevision_ = 0;
  std::atomic<bool> leads_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  // Mirrors stopping_ for the calls that take an atomic flag (watch, the keeper).
  std::atomic<bool> stopFlag_{false};
  std::thread keepAlive_;
  std::thread campaign_;
  std::thread watcher_;
};

}  // namespace

Result<std::unique_ptr<EtcdPresence>> EtcdPresence::start(
    std::shared_ptr<EtcdClient> client, std::string prefix, std::string jobId, std::string agentId,
    std::chrono::seconds leaseTtl, std::function<void(const Status&)> onLeaseLost) {
  auto presence =
      std::make_unique<EtcdAgentPresence>(std::move(client), std::move(prefix), std::move(jobId),
                                          std::move(agentId), leaseTtl, std::move(onLeaseLost));
  DTRUN_TRY(presence->start());
  return std::unique_ptr<EtcdPresence>(std::move(presence));
}

}  // namespace dtrun::rdzv
