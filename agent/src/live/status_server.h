// The status endpoint (--status_port): a small HTTP/1.1 server on a thread and io_context of its
// own, so that no client (slow, malicious or many) can delay the agent's loop. It serves only
// what the agent published last: GET /status (JSON), /metrics (Prometheus) and / (the live
// page); it never reads the agent's state. GET /stacks is answered later, when the handler
// given to serveStacks replies (other requests are served meanwhile). With a token, a request must
// carry it (an "Authorization: Bearer <token>" header, or "?token=<token>" for a browser). Every
// connection has a deadline, a header size limit and one request. publish() is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dtrun/common.h"

namespace dtrun::agent::detail {

struct StatusServerOptions {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;                           // 0: any free port (tests)
  std::string token;                                // "" = none
  std::chrono::milliseconds requestDeadline{5000};  // a slow client is cut off after this
  std::size_t maxConnections = 64;                  // more are closed at once
  std::size_t headerLimit = 8192;                   // bytes; beyond: 431
  // GET /stacks: the reply's wait; beyond it, 504 (the agent gathers for up to 60 s)
  std::chrono::milliseconds stacksDeadline{75000};
};

class StatusServer {
 public:
  // Listens and starts its thread; kConnection (one line naming the address and the fix) when the
  // address cannot be bound.
  static Result<std::unique_ptr<StatusServer>> start(const StatusServerOptions& options);
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;
  StatusServer(StatusServer&&) = delete;
  StatusServer& operator=(StatusServer&&) = delete;
  ~StatusServer();  // closes every connection and joins the thread

  [[nodiscard]] std::uint16_t port() const;
  // What GET /status and GET /metrics answer from now on.
  void publish(std::string statusJson, std::string metrics);

  // GET /stacks: `handler` runs on the server's thread, once per request, with a reply that may
  // be called once, from any thread, while this server or the reply exists. Without a handler,
  // /stacks is 404. Thread-safe.
  using StacksReply = std::function<void(std::string text)>;
  using StacksHandler = std::function<void(StacksReply reply)>;
  void serveStacks(StacksHandler handler);

  struct State;  // the listener, connections and published bodies (status_server.cpp only)

 private:
  explicit StatusServer(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace dtrun::agent::detail
