// A group's relay (dtrun/group_relay.h): its own store for the group's members, and three
// threads, each with its own connections: messages up to the job's keeper, assignments down,
// the round's end and the open round down.
#include "dtrun/group_relay.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "log.h"
#include "round_codec.h"

namespace dtrun::rdzv {
namespace {

using detail::KeeperMessage;
using detail::RoundKeys;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a relay thread blocks in one request: how soon it sees that the relay stops.
constexpr milliseconds kSlice{500};
// Messages forwarded per inbox item: a group's joins in one request.
constexpr std::size_t kBatch = 1024;
// After a round's end, how often the open round is read until the keeper opened the next one.
constexpr milliseconds kFirstRoundPoll{5};
constexpr milliseconds kLongestRoundPoll{500};

std::optional<int> parseRound(const Bytes& text) {
  int r = 0;
  if (std::from_chars(text.data(), text.data() + text.size(), r).ec != std::errc()) {
    return std::nullopt;
  }
  return r;
}

bool powerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

class Relay final : public GroupRelay {
 public:
  Relay(const ClientOptions& jobStore, const std::string& jobId, const RoundSettings& settings)
      : jobStore_(jobStore), keys_(jobId), jobId_(jobId), settings_(settings) {}

  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  Relay(Relay&&) = delete;
  Relay& operator=(Relay&&) = delete;

  ~Relay() override {
    stopping_ = true;
    pendingChanged_.notify_all();
    for (auto* t : {&up_, &assignments_, &rounds_}) {
      if (t->joinable()) {
        t->join();
      }
    }
    if (server_) {
      server_->stop();
    }
  }

  Status start(const std::string& listenHost) {
    ServerOptions options;
    options.host = listenHost;
    options.token = jobStore_.token;
    DTRUN_ASSIGN_OR_RETURN(server_, StoreServer::start(options));
    id_ = "relay:" + std::to_string(server_->port());
    ClientOptions local = jobStore_;
    local.host = "127.0.0.1";
    local.port = server_->port();
    DTRUN_ASSIGN_OR_RETURN(auto upJob, connectStore(jobStore_));
    DTRUN_ASSIGN_OR_RETURN(auto upLocal, connectStore(local));
    DTRUN_ASSIGN_OR_RETURN(auto assignJob, connectStore(jobStore_));
    DTRUN_ASSIGN_OR_RETURN(auto assignLocal, connectStore(local));
    DTRUN_ASSIGN_OR_RETURN(auto roundsJob, connectStore(jobStore_));
    DTRUN_ASSIGN_OR_RETURN(auto roundsLocal, connectStore(local));
    DTRUN_TRY(copyJobKeys(*upJob, *upLocal));
    up_ = std::thread([this, job = std::move(upJob), loc = std::move(upLocal)] {
      runThread("forwarding messages", [&] { return forwardUp(*job, *loc); });
    });
    assignments_ = std::thread([this, job = std::move(assignJob), loc = std::move(assignLocal)] {
      runThread("copying assignments", [&] { return copyAssignments(*job, *loc); });
    });
    rounds_ = std::thread([this, job = std::move(roundsJob), loc = std::move(roundsLocal)] {
      runThread("copying rounds", [&] { return copyRounds(*job, *loc); });
    });
    return Status::ok();
  }

  [[nodiscard]] std::uint16_t port() const override { return server_->port(); }

  void drain(milliseconds timeout, const std::string& agentId) override {
    const auto deadline = Clock::now() + timeout;
    std::unique_lock lock(mutex_);
    for (;;) {
      std::vector<std::string> waited;
      const auto now = Clock::now();
      for (const auto& [agent, seen] : lastSeen_) {
        if ((agentId.empty() || agent == agentId) && gone_.count(agent) == 0 &&
            now - seen < settings_.deadAfter()) {
          waited.push_back(agent);
        }
      }
      if ((waited.empty() && unforwarded_ == 0) || stopping_.load() || failed_.load()) {
        return;
      }
      if (now >= deadline) {
        std::string names;
        for (std::size_t i = 0; i < waited.size() && i < 5; ++i) {
          names += (i == 0 ? "" : ", ") + waited[i];
        }
        log::rdzv().warn(
            "group relay of job '{}': stopping after {} ms with {} member(s) yet to leave{}{}",
            jobId_, timeout.count(), waited.size(), names.empty() ? "" : ": ", names);
        return;
      }
      drained_.wait_for(lock, std::min(milliseconds(50),
                                       std::chrono::duration_cast<milliseconds>(deadline - now)));
    }
  }

 private:
  struct Pending {
    int round;
    int localSlot;
    int jobSlot;
  };

  // What members read before they join: the settings (published here unless the job has them,
  // with a keeper asked for, as a flat member would), whether the job finished, the open round.
  Status copyJobKeys(Store& job, Store& local) {
    const std::string mine = detail::encodeSettings(settings_);
    DTRUN_ASSIGN_OR_RETURN(auto held, job.compareSet(keys_.keeper(), "", mine));
    if (held == mine) {
      DTRUN_TRY(job.queuePush(detail::kKeeperRequests, jobId_));
    }
    DTRUN_TRY(local.set(keys_.keeper(), held));
    for (const auto& key : {keys_.finished(), keys_.round()}) {
      DTRUN_ASSIGN_OR_RETURN(auto value, job.tryGet(key));
      if (value) {
        DTRUN_TRY(local.set(key, *value));
      }
    }
    return Status::ok();
  }

  // A relay that lost the job's store closes its own: its members then lose theirs and act as
  // on any lost store, instead of waiting on a relay that forwards nothing.
  template <typename Loop>
  void runThread(const char* what, Loop&& loop) {
    // The first thread to fail stops the store; the others then fail on it and say nothing.
    if (auto s = loop(); !s.isOk() && !stopping_.load() && !failed_.exchange(true)) {
      log::rdzv().error("group relay of job '{}' ({}): {}; its members lose their store", jobId_,
                        what, s.message());
      drained_.notify_all();
      server_->stop();
    }
  }

  Status forwardUp(Store& job, Store& local) {
    while (!stopping_.load()) {
      auto items = local.queuePopMany(keys_.inbox(), kBatch, kSlice);
      if (!items.isOk()) {
        if (items.status().code() == Errc::kTimeout) {
          continue;
        }
        return items.status();
      }
      {
        const std::lock_guard lock(mutex_);
        unforwarded_ += items.value().size();
      }
      std::vector<KeeperMessage> messages;
      for (const auto& item : items.value()) {
        if (auto m = detail::decodeMessage(item)) {
          messages.push_back(std::move(*m));
        }
      }
      DTRUN_TRY(takeJobSlots(job, messages));
      std::vector<std::string> batch;
      for (auto& m : messages) {
        if (m.verb == "fail") {
          DTRUN_TRY(publishEnd(job, local, m.round));
        }
        noteMember(m);
        batch.push_back(detail::encodeMessage(m));
      }
      if (!batch.empty()) {
        DTRUN_TRY(job.queuePush(keys_.inbox(), detail::encodeBatch(id_, batch)));
      }
      const std::lock_guard lock(mutex_);
      unforwarded_ -= items.value().size();
      drained_.notify_all();
    }
    return Status::ok();
  }

  // Members take their slots from the relay's own arrival counters; the keeper needs slots that
  // are unique in the job: one ADD per round in the batch reserves them. Every message's slot
  // becomes the job's.
  Status takeJobSlots(Store& job, std::vector<KeeperMessage>& messages) {
    std::map<int, int> joins;  // round -> joins in this batch
    for (const auto& m : messages) {
      if (m.verb == "join") {
        joins[m.round] += 1;
      }
    }
    std::map<int, int> next;  // round -> the next reserved job slot
    for (const auto& [r, count] : joins) {
      DTRUN_ASSIGN_OR_RETURN(auto last, job.add(keys_.arrivals(r), count));
      next[r] = static_cast<int>(last) - count;
    }
    const std::lock_guard lock(mutex_);
    for (auto& m : messages) {
      const auto key = std::make_pair(m.round, m.slot);
      if (m.verb == "join") {
        const int jobSlot = next[m.round]++;
        slots_[key] = jobSlot;
        pending_.push_back({m.round, m.slot, jobSlot});
        m.slot = jobSlot;
      } else if (const auto it = slots_.find(key); it != slots_.end()) {
        m.slot = it->second;
      }
    }
    pendingChanged_.notify_all();
    return Status::ok();
  }

  // A member ended round r in the relay's store; the job's store must hold that end before the
  // keeper reads it. If another end came first, that one holds, here too.
  Status publishEnd(Store& job, Store& local, int r) {
    DTRUN_ASSIGN_OR_RETURN(auto mine, local.tryGet(keys_.end(r)));
    if (!mine) {
      return Status::ok();
    }
    DTRUN_ASSIGN_OR_RETURN(auto held, job.compareSet(keys_.end(r), "", *mine));
    return held == *mine ? Status::ok() : local.set(keys_.end(r), held);
  }

  void noteMember(const KeeperMessage& m) {
    const std::lock_guard lock(mutex_);
    lastSeen_[m.agentId] = Clock::now();
    if (m.verb == "bye" || m.verb == "leave") {
      gone_.insert(m.agentId);
    } else if (m.verb == "join") {
      gone_.erase(m.agentId);
    }
  }

  // Waits for the pending assignments of the oldest round at once: a round's close writes them
  // together, and a join the keeper answers at once (a spare, a late arrival, a closed job) is
  // answered promptly with the others of its round. A round whose keys do not all come (a join
  // the keeper refused) is read key by key after 1, 2, 4, ... quiet slices, so the others of it
  // still get theirs, while a round that gathers for minutes costs the job's store almost nothing.
  Status copyAssignments(Store& job, Store& local) {
    int quietSlices = 0;
    while (!stopping_.load()) {
      std::vector<Pending> waiting;
      {
        std::unique_lock lock(mutex_);
        pendingChanged_.wait_for(lock, kSlice,
                                 [this] { return stopping_.load() || !pending_.empty(); });
        if (pending_.empty()) {
          continue;
        }
        const int oldest =
            std::min_element(pending_.begin(), pending_.end(),
                             [](const Pending& a, const Pending& b) { return a.round < b.round; })
                ->round;
        std::copy_if(pending_.begin(), pending_.end(), std::back_inserter(waiting),
                     [oldest](const Pending& p) { return p.round == oldest; });
      }
      std::vector<std::string> jobKeys;
      jobKeys.reserve(waiting.size());
      for (const auto& p : waiting) {
        jobKeys.push_back(keys_.assign(p.round, p.jobSlot));
      }
      std::vector<std::size_t> arrived;
      std::vector<Bytes> values;
      auto all = job.wait(jobKeys, kSlice);
      if (all.isOk()) {
        DTRUN_ASSIGN_OR_RETURN(values, job.multiGet(jobKeys));
        for (std::size_t i = 0; i < waiting.size(); ++i) {
          arrived.push_back(i);
        }
      } else if (all.code() != Errc::kTimeout) {
        return all;
      } else if (powerOfTwo(++quietSlices)) {
        for (std::size_t i = 0; i < waiting.size(); ++i) {
          DTRUN_ASSIGN_OR_RETURN(auto value, job.tryGet(jobKeys[i]));
          if (value) {
            arrived.push_back(i);
            values.push_back(std::move(*value));
          }
        }
      }
      if (arrived.empty()) {
        continue;
      }
      quietSlices = 0;
      std::vector<std::string> localKeys;
      localKeys.reserve(arrived.size());
      for (const auto i : arrived) {
        localKeys.push_back(keys_.assign(waiting[i].round, waiting[i].localSlot));
      }
      DTRUN_TRY(local.multiSet(localKeys, values));
      const std::lock_guard lock(mutex_);
      std::erase_if(pending_, [&](const Pending& p) {
        return std::any_of(arrived.begin(), arrived.end(), [&](std::size_t i) {
          return waiting[i].round == p.round && waiting[i].localSlot == p.localSlot;
        });
      });
    }
    return Status::ok();
  }

  // The open round, then its end, then (polled, briefly) the next open round, and so on.
  Status copyRounds(Store& job, Store& local) {
    int mirrored = -1;
    while (!stopping_.load()) {
      if (mirrored < 0) {
        auto value = job.waitGet(keys_.round(), kSlice);
        if (!value.isOk() && value.status().code() == Errc::kTimeout) {
          continue;
        }
        DTRUN_TRY(value.status());
        if (!value.value()) {
          continue;
        }
        const auto r = parseRound(*value.value());
        if (!r) {
          return Status::protocol("job '" + jobId_ + "': the round key holds '" +
                                  value.value()->substr(0, 40) + "', not a number");
        }
        DTRUN_TRY(local.set(keys_.round(), *value.value()));
        mirrored = *r;
      }
      auto end = job.waitGet(keys_.end(mirrored), kSlice);
      if (!end.isOk() && end.status().code() == Errc::kTimeout) {
        continue;
      }
      DTRUN_TRY(end.status());
      if (!end.value()) {
        continue;
      }
      DTRUN_ASSIGN_OR_RETURN(auto held, local.compareSet(keys_.end(mirrored), "", *end.value()));
      if (held != *end.value()) {
        DTRUN_TRY(local.set(keys_.end(mirrored), *end.value()));
      }
      DTRUN_ASSIGN_OR_RETURN(mirrored, waitForNextRound(job, local, mirrored));
    }
    return Status::ok();
  }

  // After round r ended: the keeper opens r + 1 at once unless the job is over (then nothing
  // changes and this reads ever more slowly); the job's end is copied when it comes.
  Result<int> waitForNextRound(Store& job, Store& local, int r) {
    auto poll = kFirstRoundPoll;
    while (!stopping_.load()) {
      DTRUN_ASSIGN_OR_RETURN(auto value, job.tryGet(keys_.round()));
      if (const auto next = value ? parseRound(*value) : std::nullopt; next && *next > r) {
        DTRUN_TRY(local.set(keys_.round(), *value));
        return *next;
      }
      DTRUN_ASSIGN_OR_RETURN(auto finished, job.tryGet(keys_.finished()));
      if (finished) {
        DTRUN_TRY(local.set(keys_.finished(), *finished));
      }
      std::this_thread::sleep_for(poll);
      poll = std::min(poll * 2, kLongestRoundPoll);
    }
    return r;
  }

  ClientOptions jobStore_;
  RoundKeys keys_;
  std::string jobId_;
  RoundSettings settings_;
  std::string id_;
  std::unique_ptr<StoreServer> server_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::condition_variable pendingChanged_;
  std::condition_variable drained_;
  std::map<std::pair<int, int>, int> slots_;  // (round, relay slot) -> the job's slot
  std::vector<Pending> pending_;              // joins forwarded, assignment not copied yet
  std::map<std::string, Clock::time_point> lastSeen_;
  std::set<std::string> gone_;
  std::size_t unforwarded_ = 0;  // messages taken from the relay's inbox, not yet forwarded
  std::thread up_;
  std::thread assignments_;
  std::thread rounds_;
};

}  // namespace

Result<std::unique_ptr<GroupRelay>> GroupRelay::start(const ClientOptions& jobStore,
                                                      const std::string& jobId,
                                                      const RoundSettings& settings,
                                                      const std::string& listenHost) {
  auto relay = std::make_unique<Relay>(jobStore, jobId, settings);
  if (auto s = relay->start(listenHost); !s.isOk()) {
    return s.withContext("cannot start a group relay for job '" + jobId + "'");
  }
  return std::unique_ptr<GroupRelay>(std::move(relay));
}

}  // namespace dtrun::rdzv
