// Whether something accepts TCP connections at host:port: the health check's first step (is the
// store up?), the store host's question when its port is taken (who holds it?), and the
// launcher's when one node's c10d endpoint is this host (does a store already serve it?).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "dtrun/common.h"

namespace dtrun {

// One TCP connect to host:port (every address it resolves to) within `wait`, then closed.
// kConnection naming host:port and the reason when nothing accepted.
Status acceptsConnection(const std::string& host, std::uint16_t port,
                         std::chrono::milliseconds wait);

}  // namespace dtrun
