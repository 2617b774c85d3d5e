// The etcd tests' guard: where Debian's etcd binaries are missing, a test case returns early
// with a warning that says what installs them, instead of failing on a missing server.
#pragma once

#include <catch2/catch.hpp>

#include "support/etcd_server.h"

namespace dtrun::testing {

inline bool skipWithoutEtcd() {
  if (etcdAvailable()) {
    return false;
  }
  WARN(
      "skipped: /usr/bin/etcd or /usr/bin/etcdctl is missing (scripts/setup.sh installs "
      "etcd-server and etcd-client)");
  return true;
}

}  // namespace dtrun::testing
