// The store's data and its waiters: plain C++, no sockets. Not thread-safe: the server touches it
// only from its event-loop thread. Clients are identified by a ClientId the server assigns; what
// must reach another client (a released wait, a watch event) goes through the Listener.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dtrun/common.h"

#include "protocol.h"

namespace dtrun::rdzv::detail {

using ClientId = std::uint64_t;

class KvListener {
 public:
  KvListener() = default;
  KvListener(const KvListener&) = delete;
  KvListener& operator=(const KvListener&) = delete;
  KvListener(KvListener&&) = delete;
  KvListener& operator=(KvListener&&) = delete;
  virtual ~KvListener() = default;
  // A WAIT or BARRIER of `client` is satisfied: it must be sent STOP_WAITING.
  virtual void onWaitReleased(ClientId client) = 0;
  // A watched key changed (torch <= 2.0 WATCH_KEY); `event` is the encoded event to send.
  virtual void onWatchEvent(ClientId client, std::string_view event) = 0;
};

class KvState {
 public:
  // `listener` must outlive this object.
  explicit KvState(KvListener& listener) : listener_(listener) {}

  void set(std::string_view key, std::string_view value);
  // Upstream's exact semantics: missing key and empty `expected` creates it; missing key and
  // non-empty `expected` stores nothing and returns `expected`; otherwise swaps when equal.
  // Returns the value now stored (or `expected`, in the lying case).
  std::string compareSet(std::string_view key, std::string_view expected, std::string_view desired);
  // nullptr if absent. The pointer is valid until the next mutation.
  [[nodiscard]] const std::string* get(std::string_view key) const;
  // Decimal ASCII counter; a value that is not a decimal integer is an error.
  Result<std::int64_t> add(std::string_view key, std::int64_t delta);
  void append(std::string_view key, std::string_view value);
  bool deleteKey(std::string_view key);
  [[nodiscard]] std::size_t numKeys() const { return data_.size(); }
  void forEachKey(const std::function<void(const std::string&)>& visit) const;

  // A key is present when it holds a value or a non-empty queue.
  [[nodiscard]] bool present(std::string_view key) const;
  [[nodiscard]] bool check(const std::vector<std::string_view>& keys) const;
  // True if every key is present now; otherwise registers a wait released by later writes.
  bool wait(ClientId client, const std::vector<std::string_view>& keys);
  // Drops every pending wait and barrier of `client`; returns how many there were.
  std::size_t cancelWaits(ClientId client);
  [[nodiscard]] bool waiting(ClientId client) const { return waitsByClient_.contains(client); }
  // Counts an arrival at barrier `key` (stored as a decimal counter, like ADD). True if the count
  // has reached `worldSize`; otherwise the client waits until it does.
  Result<bool> barrier(ClientId client, std::string_view key, std::int64_t worldSize);

  void queuePush(std::string_view key, std::string_view value);
  // Length before the pop, and the popped value if it was not empty.
  std::size_t queuePop(std::string_view key, std::string& value);
  [[nodiscard]] std::size_t queueLen(std::string_view key) const;

  void watch(ClientId client, std::string_view key);
  // Forgets everything about a client that went away.
  void dropClient(ClientId client);

  [[nodiscard]] std::size_t pendingWaits() const { return waits_.size(); }

 private:
  using WaitId = std::uint64_t;
  struct Wait {
    ClientId client = 0;
    std::size_t remaining = 0;        // keys still missing (plain waits)
    std::int64_t barrierTarget = -1;  // >= 0 for a barrier
    std::vector<std::string> keys;    // where this wait is registered
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  template <typename V>
  using Map = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

  void store(std::string_view key, std::string value);
  void notifyWatchers(std::string_view key, WatchEvent event, std::string_view oldValue,
                      std::string_view newValue);
  // Called after `key` became present or changed: releases the waits it completes.
  void keyWritten(std::string_view key, bool wakeOnlyOne = false);
  void release(WaitId id);
  void unregister(WaitId id);
  WaitId registerWait(ClientId client, Wait wait);

  KvListener& listener_;
  Map<std::string> data_;
  Map<std::deque<std::string>> queues_;
  Map<std::vector<WaitId>> waitersByKey_;
  Map<std::vector<ClientId>> watchersByKey_;
  std::unordered_map<WaitId, Wait> waits_;
  std::unordered_map<ClientId, std::vector<WaitId>> waitsByClient_;
  WaitId nextWaitId_ = 1;
};

}  // namespace dtrun::rdzv::detail
