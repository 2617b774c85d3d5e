// The worker's connection to the agent's store, with the attempt's key prefix applied to every
// key. Thread-safe (one mutex: the client has one request in flight). Failures throw the
// runtime's exceptions, naming the operation and the key.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dtrun/rendezvous.h"
#include "dtrun/runtime.h"

namespace dtrun::runtime {

class StoreHandle {
 public:
  StoreHandle(std::unique_ptr<rdzv::Store> store, std::string prefix,
              std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::string& value);
  // Waits for the key up to the handle's timeout (TimeoutError naming `waitingFor`).
  std::string get(const std::string& key, const std::string& waitingFor = {});
  std::int64_t add(const std::string& key, std::int64_t delta);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
            const std::string& waitingFor);
  bool check(const std::vector<std::string>& keys);
  // Best effort, never queued behind another call of this handle: false (nullopt) when one is in
  // flight, the store fails, or (tryGetNow) the key is absent. What a failing group tells its
  // peers, and their reads of it.
  bool trySet(const std::string& key, const std::string& value);
  std::optional<std::string> tryGetNow(const std::string& key);
  [[nodiscard]] const std::string& prefix() const { return prefix_; }
  [[nodiscard]] std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  [[nodiscard]] std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  [[nodiscard]] std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::mutex mutex_;
  std::unique_ptr<rdzv::Store> store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace dtrun::runtime
