// Store client: the Store interface's operations, each one request (or one pipeline) on the
// connection to the server (store_connection.h), with its deadline.
#include <algorithm>
#include <array>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "dtrun/rendezvous.h"

#include "protocol.h"
#include "store_connection.h"

namespace dtrun::rdzv {
namespace {

using Clock = std::chrono::steady_clock;
using detail::Op;
using detail::remainingMs;
using detail::Request;
using std::chrono::milliseconds;

std::string firstKeysText(std::span<const std::string> keys) {
  constexpr std::size_t kShown = 4;
  std::string out = "[";
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    out += (i > 0 ? ", " : "") + (keys[i].size() > 80 ? keys[i].substr(0, 80) + "..." : keys[i]);
  }
  if (keys.size() > kShown) {
    out += ", ... (" + std::to_string(keys.size()) + " keys)";
  }
  return out + "]";
}

class TcpStore final : public Store, private detail::StoreConnection {
 public:
  explicit TcpStore(ClientOptions options) : StoreConnection(std::move(options)) {}

  Status connect() { return connectUntil(Clock::now() + options_.timeout); }

  Status set(std::string_view key, std::string_view value) override {
    Request r{.op = Op::kSet, .key = key, .value = value};
    return call(r, "set(" + std::string(key) + ")", deadline(), nullptr);
  }

  Result<Bytes> get(std::string_view key) override {
    const std::string keyString(key);
    DTRUN_TRY(wait(std::span(&keyString, 1), options_.timeout));
    Request r{.op = Op::kGet, .key = key};
    Bytes value;
    DTRUN_TRY(call(r, "get(" + keyString + ")", deadline(),
                   [&](auto dl) { return readBytes(value, dl); }));
    return value;
  }

  Result<std::int64_t> add(std::string_view key, std::int64_t delta) override {
    Request r{.op = Op::kAdd, .key = key, .integer = delta};
    return callForInt(r, "add(" + std::string(key) + ")");
  }

  Result<Bytes> compareSet(std::string_view key, std::string_view expected,
                           std::string_view desired) override {
    Request r{.op = Op::kCompareSet, .key = key, .value = expected, .desired = desired};
    Bytes value;
    DTRUN_TRY(call(r, "compare_set(" + std::string(key) + ")", deadline(),
                   [&](auto dl) { return readBytes(value, dl); }));
    return value;
  }

  Result<bool> check(std::span<const std::string> keys) override {
    Request r{.op = Op::kCheck, .keys = views(keys)};
    char reply = 0;
    DTRUN_TRY(call(r, "check(" + firstKeysText(keys) + ")", deadline(),
                   [&](auto dl) { return readByte(reply, dl); }));
    return reply == detail::kCheckReady;
  }

  Result<std::optional<Bytes>> tryGet(std::string_view key) override {
    // CHECK and GET pipelined: GET alone cannot tell an absent key from an empty value.
    const std::array<Request, 2> checkAndGet{Request{.op = Op::kCheck, .keys = {key}},
                                             Request{.op = Op::kGet, .key = key}};
    char present = 0;
    Bytes value;
    const auto readBoth = [&](Clock::time_point dl) {
      DTRUN_TRY(readByte(present, dl));
      return readBytes(value, dl);
    };
    DTRUN_TRY(callAll(checkAndGet, "try_get(" + std::string(key) + ")", deadline(), readBoth));
    return present == detail::kCheckReady ? std::optional<Bytes>(std::move(value)) : std::nullopt;
  }

  Status wait(std::span<const std::string> keys, milliseconds timeout) override {
    Request r{.op = Op::kWait, .keys = views(keys)};
    return waitForStop(r, "wait(" + firstKeysText(keys) + ")", timeout);
  }

  Result<std::optional<Bytes>> waitGet(std::string_view key, milliseconds timeout) override {
    if (dialect_ != detail::Dialect::kV2 || !waitGetServed_) {
      return Store::waitGet(key, timeout);
    }
    const auto until = Clock::now() + timeout;
    const std::string what = "wait_get(" + std::string(key) + ")";
    if (!fd_.valid()) {
      DTRUN_TRY(connectUntil(until).withContext(what));
    }
    bool released = false;  // the kStopWaiting came: the value follows
    Bytes value;
    const auto readReply = [&](Clock::time_point dl) {
      if (!released) {
        char reply = 0;
        DTRUN_TRY(readByte(reply, dl));
        if (reply != detail::kStopWaiting) {
          return Status::protocol(what + ": unexpected reply byte " +
                                  std::to_string(static_cast<int>(reply)));
        }
        released = true;
      }
      return readBytes(value, dl);
    };
    const Status s = call(Request{.op = Op::kWaitGet, .key = key}, what, until, readReply,
                          /*keepOnTimeout=*/true);
    if (s.isOk()) {
      waitGetConfirmed_ = true;
      return std::optional<Bytes>(std::move(value));
    }
    if (s.code() != Errc::kTimeout) {
      if (!waitGetConfirmed_) {
        // A store from before WAIT_GET closes the connection on its opcode: wait, then read.
        waitGetServed_ = false;
        return Store::waitGet(
            key, std::max(milliseconds(1),
                          std::chrono::duration_cast<milliseconds>(until - Clock::now())));
      }
      return s;
    }
    const Status timedOut = Status::timeout(what + " on " + peer_ + ": not satisfied within " +
                                            std::to_string(timeout.count()) + "ms");
    if (released) {  // cut off inside the value: the key is there, a new connection reads it
      drop();
      return timedOut;
    }
    // Cancel the wait; a release that crossed the cancel brings the value before WAIT_CANCELED.
    const auto cancelDeadline = deadline();
    Status c =
        writeAll(std::string(1, static_cast<char>(*detail::wireFromOp(dialect_, Op::kCancelWait))),
                 cancelDeadline);
    char reply = 0;
    if (c.isOk()) {
      c = readByte(reply, cancelDeadline);
    }
    if (c.isOk() && reply == detail::kStopWaiting) {
      released = true;
      c = readBytes(value, cancelDeadline);
      if (c.isOk()) {
        c = readByte(reply, cancelDeadline);
      }
    }
    if (!c.isOk() || reply != detail::kWaitCanceled) {
      drop();  // the connection's replies are out of step: the next call reconnects
    }
    if (released && c.isOk()) {
      return std::optional<Bytes>(std::move(value));
    }
    return timedOut;
  }

  Result<std::int64_t> numKeys() override {
    Request r{.op = Op::kNumKeys};
    return callForInt(r, "num_keys()");
  }

  Result<bool> deleteKey(std::string_view key) override {
    Request r{.op = Op::kDeleteKey, .key = key};
    DTRUN_ASSIGN_OR_RETURN(auto n, callForInt(r, "delete_key(" + std::string(key) + ")"));
    return n == 1;
  }

  Status append(std::string_view key, std::string_view value) override {
    Request r{.op = Op::kAppend, .key = key, .value = value};
    return call(r, "append(" + std::string(key) + ")", deadline(), nullptr);
  }

  Result<std::vector<Bytes>> multiGet(std::span<const std::string> keys) override {
    const std::string what = "multi_get(" + firstKeysText(keys) + ")";
    DTRUN_TRY(wait(keys, options_.timeout));
    Request r{.op = Op::kMultiGet, .keys = views(keys)};
    std::vector<Bytes> values(keys.size());
    const auto readValues = [&](Clock::time_point dl) {
      for (auto& value : values) {
        DTRUN_TRY(readBytes(value, dl));
      }
      return Status::ok();
    };
    DTRUN_TRY(call(r, what, deadline(), readValues));
    return values;
  }

  Status multiSet(std::span<const std::string> keys, std::span<const Bytes> values) override {
    if (keys.size() != values.size()) {
      return Status::invalidArgument("multi_set: " + std::to_string(keys.size()) + " keys but " +
                                     std::to_string(values.size()) + " values");
    }
    Request r{.op = Op::kMultiSet, .keys = views(keys), .values = views(values)};
    return call(r, "multi_set(" + firstKeysText(keys) + ")", deadline(), nullptr);
  }

  Result<std::chrono::microseconds> ping() override {
    const auto nonce = static_cast<std::uint32_t>(::getpid()) ^ ++pingCount_;
    Request r{.op = Op::kPing, .word = nonce};
    const auto start = Clock::now();
    std::uint32_t echo = 0;
    DTRUN_TRY(call(r, "ping()", deadline(), [&](auto dl) { return readU32(echo, dl); }));
    if (echo != nonce) {
      drop();
      return Status::protocol("ping() on " + peer_ + ": echoed nonce " + std::to_string(echo) +
                              " instead of " + std::to_string(nonce));
    }
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  }

  Status queuePush(std::string_view key, std::string_view value) override {
    Request r{.op = Op::kQueuePush, .key = key, .value = value};
    return call(r, "queue_push(" + std::string(key) + ")", deadline(), nullptr);
  }

  Result<Bytes> queuePop(std::string_view key, milliseconds timeout) override {
    DTRUN_ASSIGN_OR_RETURN(auto items, queuePopMany(key, 1, timeout));
    return std::move(items.front());
  }

  Result<std::vector<Bytes>> queuePopMany(std::string_view key, std::size_t maxItems,
                                          milliseconds timeout) override {
    const std::string keyString(key);
    const std::string what = "queue_pop(" + keyString + ")";
    const auto until = Clock::now() + timeout;
    const Request pop{.op = Op::kQueuePop, .key = key};
    std::vector<Bytes> items;
    const auto readPopped = [&](Clock::time_point dl) {
      std::int64_t length = 0;
      DTRUN_TRY(readI64(length, dl));
      return length > 0 ? readBytes(items.emplace_back(), dl) : Status::ok();
    };
    for (;;) {
      // Another consumer may take the item between our WAIT and POP: wait again until the deadline.
      Request waitRequest{.op = Op::kWait, .keys = {key}};
      DTRUN_TRY(waitForStop(waitRequest, what, milliseconds(remainingMs(until))));
      // The first item and the length of the rest in one round trip, then the rest (pipelined
      // requests) in one more: a busy queue drains in three round trips, not two per item.
      const std::array<Request, 2> firstAndLength{pop, Request{.op = Op::kQueueLen, .key = key}};
      std::int64_t left = 0;
      const auto readFirstAndLength = [&](Clock::time_point dl) {
        DTRUN_TRY(readPopped(dl));
        return readI64(left, dl);
      };
      DTRUN_TRY(callAll(firstAndLength, what, deadline(), readFirstAndLength));
      const auto more = std::min<std::int64_t>(left, static_cast<std::int64_t>(maxItems) - 1);
      if (!items.empty() && more > 0) {
        const std::vector<Request> pops(static_cast<std::size_t>(more), pop);
        const auto readRest = [&](Clock::time_point dl) {
          for (std::int64_t i = 0; i < more; ++i) {
            DTRUN_TRY(readPopped(dl));
          }
          return Status::ok();
        };
        DTRUN_TRY(callAll(pops, what, deadline(), readRest));
      }
      if (!items.empty()) {
        return items;
      }
    }
  }

  Result<std::int64_t> queueLen(std::string_view key) override {
    Request r{.op = Op::kQueueLen, .key = key};
    return callForInt(r, "queue_len(" + std::string(key) + ")");
  }

  Result<std::vector<Bytes>> listKeys() override {
    Request r{.op = Op::kListKeys};
    std::vector<Bytes> keys;
    const auto readKeys = [&](Clock::time_point dl) {
      std::int64_t n = 0;
      DTRUN_TRY(readI64(n, dl));
      if (n < 0) {
        return Status::protocol("negative key count " + std::to_string(n));
      }
      keys.resize(static_cast<std::size_t>(n));
      for (auto& key : keys) {
        DTRUN_TRY(readBytes(key, dl));
      }
      return Status::ok();
    };
    DTRUN_TRY(call(r, "list_keys()", deadline(), readKeys));
    return keys;
  }

  Status barrier(std::string_view key, std::int64_t worldSize, milliseconds timeout) override {
    Request r{.op = Op::kBarrier, .key = key, .integer = worldSize};
    return waitForStop(r, "barrier(" + std::string(key) + ", " + std::to_string(worldSize) + ")",
                       timeout);
  }

  [[nodiscard]] std::string peer() const override { return peer_; }

 private:
  template <typename Strings>
  static std::vector<std::string_view> views(const Strings& strings) {
    return {strings.begin(), strings.end()};
  }

  Result<std::int64_t> callForInt(const Request& request, const std::string& what) {
    std::int64_t value = 0;
    DTRUN_TRY(call(request, what, deadline(), [&](auto dl) { return readI64(value, dl); }));
    return value;
  }

  // WAIT and BARRIER: the reply (STOP_WAITING) may come much later. On timeout the server is told
  // to drop the wait; its reply is 01, or 00 then 01 if the wait completed meanwhile.
  Status waitForStop(const Request& request, const std::string& what, milliseconds timeout) {
    const auto until = Clock::now() + timeout;
    char reply = 0;
    auto s = call(
        request, what, until, [&](auto dl) { return readByte(reply, dl); },
        /*keepOnTimeout=*/dialect_ == detail::Dialect::kV2);
    if (s.isOk()) {
      return reply == detail::kStopWaiting
                 ? Status::ok()
                 : Status::protocol(what + " on " + peer_ + ": unexpected reply byte " +
                                    std::to_string(static_cast<int>(reply)));
    }
    if (s.code() != Errc::kTimeout || !fd_.valid() || dialect_ != detail::Dialect::kV2) {
      drop();
      return s;
    }
    Status timedOut = Status::timeout(what + " on " + peer_ + ": not satisfied within " +
                                      std::to_string(timeout.count()) + "ms");
    const auto cancelDeadline = deadline();
    Status c =
        writeAll(std::string(1, static_cast<char>(*detail::wireFromOp(dialect_, Op::kCancelWait))),
                 cancelDeadline);
    if (c.isOk()) {
      c = readByte(reply, cancelDeadline);
    }
    if (c.isOk() && reply == detail::kStopWaiting) {
      c = readByte(reply, cancelDeadline);
    }
    if (!c.isOk() || reply != detail::kWaitCanceled) {
      drop();
    }
    return timedOut;
  }

  std::uint32_t pingCount_ = 0;
  bool waitGetServed_ = true;      // false once the store turned WAIT_GET away
  bool waitGetConfirmed_ = false;  // the store answered one
};

}  // namespace

Result<std::unique_ptr<Store>> connectStore(const ClientOptions& options) {
  if (options.port == 0) {
    return Status::invalidArgument(
        "connectStore: port 0 is not a store address; pass the port "
        "the server reported");
  }
  auto store = std::make_unique<TcpStore>(options);
  DTRUN_TRY(store->connect());
  return std::unique_ptr<Store>(std::move(store));
}

StoreFactory storeFactory(const ClientOptions& options) {
  return [options] { return connectStore(options); };
}

}  // namespace dtrun::rdzv
