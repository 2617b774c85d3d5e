// A job's keeper (runKeeper) on a thread of its own, over any store, stopped (as if its agent
// died) by stop() or when destroyed: the tests of a keeper taking over from another.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "dtrun/round.h"

namespace dtrun::testing {

class KeeperThread {
 public:
  KeeperThread(rdzv::StoreFactory stores, std::string job, rdzv::KeeperOptions options = {}) {
    thread_ = std::thread([this, stores = std::move(stores), job = std::move(job), options] {
      auto store = stores();
      result_ = store.isOk() ? rdzv::runKeeper(std::move(store).value(), job, options, stopping_)
                             : store.status();
    });
  }
  KeeperThread(const KeeperThread&) = delete;
  KeeperThread& operator=(const KeeperThread&) = delete;
  KeeperThread(KeeperThread&&) = delete;
  KeeperThread& operator=(KeeperThread&&) = delete;
  ~KeeperThread() { static_cast<void>(stop()); }
  Status stop() {
    stopping_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
    return result_;
  }

 private:
  std::atomic<bool> stopping_{false};
  Status result_;
  std::thread thread_;
};

}  // namespace dtrun::testing
