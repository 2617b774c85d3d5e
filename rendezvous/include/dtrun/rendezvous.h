// dtrun's key-value store: a server wire-compatible with PyTorch's TCPStore (torch <= 2.0 and
// >= 2.2 clients on one key space) and a C++ client that speaks the >= 2.2 dialect.
// StoreServer runs its own event-loop thread; its methods are thread-safe. A Store client is
// NOT thread-safe: use one per thread (each call blocks, one request in flight).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/common.h"

namespace dtrun::rdzv {

struct ServerOptions {
  // "" listens on every address, IPv6 and IPv4 (dual-stack "::", falling back to 0.0.0.0).
  std::string host;
  std::uint16_t port = 0;  // 0 = any free port; port() reports the bound one
  std::size_t maxKeyLength = std::size_t{8} * 1024;
  std::size_t maxValueLength = std::size_t{8} * 1024 * 1024;
  std::size_t maxKeysPerRequest = std::size_t{128} * 1024;
  // Connections served at once. One more is accepted and closed straight away, with a warning
  // ("connection from ... refused: limit of N connections reached"); the process also needs
  // that many file descriptors (`dtrun store` raises its soft RLIMIT_NOFILE to the hard one).
  std::size_t maxConnections = 16384;
  // Reply bytes a client has not read yet. Over it, the server stops reading that client's
  // requests until it catches up (a slow reader slows only itself); a client that is then sent
  // this much again in events it did not ask for (WATCH_KEY) is dropped. With the request limit
  // this bounds a connection's memory: about 2 x request + backlog + one reply.
  std::size_t maxReplyBacklog = std::size_t{64} * 1024 * 1024;
  // Non-empty: a client must prove it (a challenge-response over HMAC-SHA256, the token never
  // travels), except clients from a host where one already did: PyTorch's clients cannot, and are
  // served from the job's hosts only.
  std::string token;
};

// Serves the store on a background thread until destroyed (or stop()).
class StoreServer {
 public:
  StoreServer() = default;
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  StoreServer(StoreServer&&) = delete;
  StoreServer& operator=(StoreServer&&) = delete;
  virtual ~StoreServer() = default;
  [[nodiscard]] static Result<std::unique_ptr<StoreServer>> start(const ServerOptions& options);

  [[nodiscard]] virtual std::uint16_t port() const = 0;
  // Closes the listener and every connection and joins the thread. Idempotent.
  virtual void stop() = 0;
  // Blocks the caller until stop() is called from another thread (for `dtrun store`).
  virtual void waitUntilStopped() = 0;
};

// Which operation numbering the client speaks. kV2 (torch >= 2.2) is the default and the only one
// with CANCEL_WAIT; kLegacy (torch <= 2.0) exists so one client program can drive a torch 1.13
// server, e.g. in bench/store. A timed-out wait closes a kLegacy connection (it cannot cancel).
enum class Dialect : std::uint8_t { kV2, kLegacy };

struct ClientOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  // Deadline for connecting (retries with jittered backoff until then) and for every call that
  // does not take its own timeout.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  Dialect dialect = Dialect::kV2;
  // The store's token ("" = none); kV2 only. A wrong one fails connect with a clear error.
  std::string token;
};

using Bytes = std::string;

// A connection to a store. Every failure names the operation, the keys and the peer, e.g.
// "wait([a, b]) on 127.0.0.1:29500: no reply within 300ms".
class Store {
 public:
  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  Store(Store&&) = delete;
  Store& operator=(Store&&) = delete;
  virtual ~Store() = default;

  virtual Status set(std::string_view key, std::string_view value) = 0;
  // Waits until the key exists (up to the store timeout), then returns its value.
  virtual Result<Bytes> get(std::string_view key) = 0;
  // The value if `key` is present now, nullopt if not: one round trip, never waits.
  virtual Result<std::optional<Bytes>> tryGet(std::string_view key) = 0;
  virtual Result<std::int64_t> add(std::string_view key, std::int64_t delta) = 0;
  // Returns what is stored afterwards (with upstream's quirk: `expected` when the key is missing
  // and `expected` is not empty).
  virtual Result<Bytes> compareSet(std::string_view key, std::string_view expected,
                                   std::string_view desired) = 0;
  virtual Result<bool> check(std::span<const std::string> keys) = 0;
  // Waits until every key exists. On timeout the server is told to forget the wait and the
  // connection stays usable; the Status is kTimeout.
  virtual Status wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) = 0;
  // wait() on one key, then its value; nullopt when it was deleted between the two. By default
  // two requests; dtrun's store answers both in one round trip (WAIT_GET).
  virtual Result<std::optional<Bytes>> waitGet(std::string_view key,
                                               std::chrono::milliseconds timeout) {
    const std::array<std::string, 1> keys{std::string(key)};
    DTRUN_TRY(wait(keys, timeout));
    return tryGet(key);
  }
  virtual Result<std::int64_t> numKeys() = 0;
  virtual Result<bool> deleteKey(std::string_view key) = 0;
  virtual Status append(std::string_view key, std::string_view value) = 0;
  // Waits for all keys (up to the store timeout), then returns their values in order.
  virtual Result<std::vector<Bytes>> multiGet(std::span<const std::string> keys) = 0;
  virtual Status multiSet(std::span<const std::string> keys, std::span<const Bytes> values) = 0;
  // Round trip with a nonce; returns its duration.
  virtual Result<std::chrono::microseconds> ping() = 0;
  virtual Status queuePush(std::string_view key, std::string_view value) = 0;
  // Waits up to `timeout` for an item, then pops it.
  virtual Result<Bytes> queuePop(std::string_view key, std::chrono::milliseconds timeout) = 0;
  // Waits up to `timeout` for an item, then pops it and up to maxItems - 1 more that are queued
  // already, in a fixed number of round trips (a consumer draining a busy queue).
  virtual Result<std::vector<Bytes>> queuePopMany(std::string_view key, std::size_t maxItems,
                                                  std::chrono::milliseconds timeout) = 0;
  virtual Result<std::int64_t> queueLen(std::string_view key) = 0;
  virtual Result<std::vector<Bytes>> listKeys() = 0;
  // A number no other caller of takeTicket(key) gets: 1, 2, 3... in the order the callers came,
  // and how many were taken so far. By default add(key, 1) and add(key, 0); a store where one
  // counter that every caller adds to is contended (etcd: a read and a guarded write, again for
  // every caller that came first) hands them out in one request each.
  virtual Result<std::int64_t> takeTicket(std::string_view key) { return add(key, 1); }
  virtual Result<std::int64_t> ticketsTaken(std::string_view key) { return add(key, 0); }
  // Counts this caller in at `key` and returns once `worldSize` callers have arrived.
  virtual Status barrier(std::string_view key, std::int64_t worldSize,
                         std::chrono::milliseconds timeout) = 0;

  [[nodiscard]] virtual std::string peer() const = 0;
};

[[nodiscard]] Result<std::unique_ptr<Store>> connectStore(const ClientOptions& options);

// Opens a new connection to a job's store: the dtrun store, or etcd under the job's prefix.
// Whoever needs a connection of its own (the round protocol's two, the report, the console
// relay) calls it, and does not care which backend is below.
using StoreFactory = std::function<Result<std::unique_ptr<Store>>()>;
[[nodiscard]] StoreFactory storeFactory(const ClientOptions& options);

}  // namespace dtrun::rdzv
