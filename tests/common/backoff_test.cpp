#include <catch2/catch.hpp>

#include "dtrun/common.h"

using namespace std::chrono_literals;

TEST_CASE("backoff without jitter grows geometrically up to its cap", "[unit][common]") {
  dtrun::Backoff backoff(
      {.initialInterval = 10ms, .maxInterval = 40ms, .multiplier = 2.0, .randomization = 0.0});
  CHECK(backoff.nextDelay() == 10ms);
  CHECK(backoff.nextDelay() == 20ms);
  CHECK(backoff.nextDelay() == 40ms);
  CHECK(backoff.nextDelay() == 40ms);
}

TEST_CASE("backoff jitter stays within the randomization band", "[unit][common]") {
  dtrun::Backoff backoff(
      {.initialInterval = 100ms, .maxInterval = 100ms, .multiplier = 1.0, .randomization = 0.5});
  for (int i = 0; i < 100; ++i) {
    const auto delay = backoff.nextDelay();
    CHECK(delay >= 50ms);
    CHECK(delay <= 150ms);
  }
}

TEST_CASE("status carries its code, message and added context", "[unit][common]") {
  const auto s = dtrun::Status::timeout("wait([a]) on h:1").withContext("rendezvous");
  CHECK_FALSE(s.isOk());
  CHECK(s.code() == dtrun::Errc::kTimeout);
  CHECK(s.toString() == "timeout: rendezvous: wait([a]) on h:1");
  CHECK(dtrun::Status::ok().toString() == "ok");
  const dtrun::Result<int> r = dtrun::Status::invalidArgument("bad");
  CHECK_FALSE(r.isOk());
  CHECK(r.status().message() == "bad");
  const dtrun::Result<int> v = 7;
  REQUIRE(v.isOk());
  CHECK(v.value() == 7);
}
