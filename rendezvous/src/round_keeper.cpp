// The keeper service, which starts a keeper (keeper.h) per job that asks for one, and runKeeper,
// one job's keeper in the calling thread.
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "dtrun/round.h"

#include "keeper.h"
#include "log.h"
#include "round_codec.h"

namespace dtrun::rdzv {
namespace {

using detail::Keeper;
using detail::KeeperMessage;
using detail::kPopSlice;
using detail::RoundKeys;

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
