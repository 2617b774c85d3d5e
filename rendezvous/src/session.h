// One client connection of the store server. Lives on the server's event-loop thread only; its
// lifetime is that of its pending asynchronous operations (shared_from_this).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange under C++20
#include <vector>

#include <boost/asio/ip/tcp.hpp>

#include "kv_state.h"
#include "protocol.h"

namespace dtrun::rdzv::detail {

class Session;

// Per-connection resource limits (see ServerOptions::maxConnections and maxReplyBacklog).
struct ConnectionLimits {
  std::size_t maxConnections = 16384;
  std::size_t maxReplyBacklog = std::size_t{64} * 1024 * 1024;
};

// What sessions share: the key space, the limits and the table of live sessions, which routes
// the KvState's notifications to the right connection. Event-loop thread only.
class ServerCore final : public KvListener {
 public:
  ServerCore(const Limits& limits, const ConnectionLimits& connectionLimits, std::string token)
      : limits_(limits),
        connectionLimits_(connectionLimits),
        token_(std::move(token)),
        kv_(*this) {}

  [[nodiscard]] const Limits& limits() const { return limits_; }
  [[nodiscard]] const ConnectionLimits& connectionLimits() const { return connectionLimits_; }
  // "" = no token: every client is served, as by torch's TCPStore.
  [[nodiscard]] const std::string& token() const { return token_; }
  // Hosts that proved the token: clients that cannot (PyTorch's) are served from these only.
  void admitHost(const std::string& address) { admittedHosts_.insert(address); }
  [[nodiscard]] bool hostAdmitted(const std::string& address) const {
    return admittedHosts_.count(address) != 0;
  }
  KvState& kv() { return kv_; }

  void add(const std::shared_ptr<Session>& session);
  void remove(ClientId id);
  void closeAll();
  [[nodiscard]] std::size_t sessionCount() const { return sessions_.size(); }

  void onWaitReleased(ClientId client) override;
  void onWatchEvent(ClientId client, std::string_view event) override;

 private:
  const Limits limits_;
  const ConnectionLimits connectionLimits_;
  const std::string token_;
  std::unordered_set<std::string> admittedHosts_;
  KvState kv_;
  // Raw pointers: a session removes itself here when it closes, before it can be destroyed.
  std::unordered_map<ClientId, Session*> sessions_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(boost::asio::ip::tcp::socket socket, ClientId id, ServerCore& core);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  Session(Session&&) = delete;
  Session& operator=(Session&&) = delete;
  ~Session() = default;

  void start();
  // Queues a reply for the client; it is written once the current batch of requests is handled.
  void send(std::string_view bytes);
  // Queues bytes the client did not ask for in its current request (a watch event, a released
  // wait): a client that lets a backlog limit's worth of them pile up past the limit is dropped.
  void notify(std::string_view bytes);
  // `reason` is logged (warn when `error`, else debug); pending waits are dropped.
  void close(std::string_view reason, bool error);
  [[nodiscard]] ClientId id() const { return id_; }
  // This client's wait (or barrier) was released: kStopWaiting, with the value for a WAIT_GET.
  void onWaitReleased();

 private:
  // WAIT_GET: the value now, or a wait; refused while another wait of this client is pending
  // (a release names no wait, so one at a time tells which reply it owes).
  bool waitGet(std::string_view key);
  void readSome();
  void onRead(const boost::system::error_code& ec, std::size_t n);
  // processInput until it pauses or the buffer holds no complete request; false once closed or
  // paused (then no read is started: the client's requests wait in in_ and the socket).
  bool handleInput();
  void unpause();
  // Handles every complete request in the buffer; false once the session closed.
  bool processInput();
  // False (after closing) if the request is refused.
  bool dispatch(const Request& request);
  // With a token set: the handshake's two steps, and whether anything else may be served yet.
  bool authenticate(const Request& request);
  bool admitted();
  void flush();
  [[nodiscard]] std::size_t backlog() const { return outPending_.size() + outWriting_.size(); }
  // Called when a write completes: resumes a paused client once its backlog is under the limit.
  void resumeIfDrained();

  boost::asio::ip::tcp::socket socket_;
  const ClientId id_;
  ServerCore& core_;  // owned by the server, which closes every session before destroying it
  std::string peer_;
  std::string peerHost_;     // the address alone, for the admitted-hosts check
  std::string localHost_;    // our end's address: equal to peerHost_ for a client on this host
  std::string serverNonce_;  // sent in answer to AUTH_CHALLENGE
  std::string clientNonce_;
  bool authenticated_ = false;
  std::optional<Dialect> dialect_;
  std::vector<char> in_;
  std::size_t inSize_ = 0;
  // Bytes the incomplete request at the front of in_ needs at least: a large MULTI_SET arriving
  // in many reads is parsed again only once that much is here, not after every read.
  std::size_t pendingNeed_ = 0;
  Request request_;  // reused across requests to keep its key vectors' capacity
  std::string outPending_;
  std::string outWriting_;
  std::string scratch_;
  std::optional<std::string> waitGetKey_;  // the key of the pending WAIT_GET, if one is
  bool writing_ = false;
  bool dispatching_ = false;
  bool closed_ = false;
  // Over the backlog limit: requests stay unread (in_ and the socket) until replies drain.
  bool paused_ = false;
  // Event bytes queued while over the backlog limit; a limit's worth more drops the client.
  std::size_t notifiedOverLimit_ = 0;
  bool pauseLogged_ = false;
};

}  // namespace dtrun::rdzv::detail
