// A rank of an in-process job: init(Membership) for rank `rank` of `world` against a store on
// this host's `port`, keys under `prefix` (one per test job). Error handlers are process-wide,
// not a thread's to install.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "dtrun/runtime.h"

namespace dtrun::testing {

inline runtime::Context joinAsThread(int rank, int world, std::uint16_t port,
                                     const std::string& prefix) {
  runtime::Membership who;
  who.rank = rank;
  who.worldSize = world;
  who.localRank = rank;
  who.localWorldSize = world;
  who.storePort = port;
  who.storePrefix = prefix;
  runtime::InitOptions options;
  options.timeout = std::chrono::seconds(30);
  options.installErrorHandlers = false;
  return runtime::init(who, options);
}

}  // namespace dtrun::testing
