// One connection of the store client (tcp_store.cpp) to a TCPStore server: connecting (retried
// with backoff until the deadline), torch's handshake and the token's proof, requests written and
// replies read. The descriptor is non-blocking and every wait goes through poll() with the call's
// deadline, so no call can hang past its timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "dtrun/common.h"
#include "dtrun/rendezvous.h"

#include "protocol.h"

namespace dtrun::rdzv::detail {

// Milliseconds from now to `deadline`, as poll() takes them (0 once it has passed).
int remainingMs(std::chrono::steady_clock::time_point deadline);

class StoreConnection {
 public:
  using Clock = std::chrono::steady_clock;
  using ReplyReader = std::function<Status(Clock::time_point)>;

  explicit StoreConnection(ClientOptions options);

  // Connects (and shakes hands), retrying with backoff until `until`; kDenied (a refused token)
  // is not retried.
  Status connectUntil(Clock::time_point until);

  // Closes the connection: the next call reconnects.
  void drop();

  // Sends `request` and reads its reply with `readReply` (none if null). A failure drops the
  // connection (the next call reconnects) and names the operation and the peer; with
  // `keepOnTimeout`, a reply that did not come in time leaves it open for the caller to cancel.
  Status call(const Request& request, const std::string& what, Clock::time_point until,
              const ReplyReader& readReply, bool keepOnTimeout = false);

  // Sends `requests` in one write (the server answers them in order) and reads every reply.
  Status callAll(std::span<const Request> requests, const std::string& what,
                 Clock::time_point until, const ReplyReader& readReply, bool keepOnTimeout = false);

  // Timeouts from the low-level readers keep fd_ open; waitForStop (tcp_store.cpp) decides what
  // happens next.
  Status writeAll(std::string_view bytes, Clock::time_point until);
  Status readByte(char& out, Clock::time_point until);
  Status readU32(std::uint32_t& out, Clock::time_point until);
  Status readI64(std::int64_t& out, Clock::time_point until);
  Status readBytes(Bytes& out, Clock::time_point until);

 protected:
  // The deadline of a call that takes the options' timeout. The store's operations (TcpStore
  // derives from this) read the settings and the descriptor below.
  [[nodiscard]] Clock::time_point deadline() const { return Clock::now() + options_.timeout; }

  const ClientOptions options_;
  const std::string peer_;
  const Dialect dialect_;
  UniqueFd fd_;

 private:
  Status connectOnce(Clock::time_point until);

  // torch >= 2.2: VALIDATE with the magic, then PING; the echo proves a compatible server.
  Status handshake(Clock::time_point until);

  // The store sends a fresh nonce; the proof covers it and ours (see store_auth.h).
  Status proveToken(Clock::time_point until);

  Status fill(std::size_t want, Clock::time_point until);

  Status pollFor(short events, Clock::time_point until);

  static constexpr std::size_t kReadChunk = std::size_t{64} * 1024;
  static constexpr std::uint64_t kMaxReplyValue = 1ULL << 32;

  std::string out_;
  std::string in_;
  std::size_t inBegin_ = 0;
  std::size_t inEnd_ = 0;
};

}  // namespace dtrun::rdzv::detail
