// Helpers shared by dtrun's tests: a store server on a free port and a client of it (and, through
// process.h, polling with a deadline and a child process that is always reaped). Not
// thread-safe unless a helper says so.
#pragma once

#include <chrono>
#include <memory>
#include <stdexcept>
#include <utility>

#include "dtrun/rendezvous.h"

#include "support/process.h"

namespace dtrun::testing {

// A store server on port 0 for the duration of a test.
inline std::unique_ptr<rdzv::StoreServer> startServer(rdzv::ServerOptions options = {}) {
  options.host = options.host.empty() ? "127.0.0.1" : options.host;
  auto server = rdzv::StoreServer::start(options);
  if (!server.isOk()) {
    throw std::runtime_error(server.status().toString());
  }
  return std::move(server).value();
}

inline std::unique_ptr<rdzv::Store> connect(
    std::uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  rdzv::ClientOptions options;
  options.port = port;
  options.timeout = timeout;
  auto store = rdzv::connectStore(options);
  if (!store.isOk()) {
    throw std::runtime_error(store.status().toString());
  }
  return std::move(store).value();
}

}  // namespace dtrun::testing
