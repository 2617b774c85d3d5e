// Hostile or broken clients: each must lose only its own connection while a well-behaved client
// keeps being answered.
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "protocol.h"
#include "rendezvous/raw_client.h"
#include "support/test_support.h"

using namespace std::chrono_literals;
using dtrun::rdzv::detail::appendBytes;
using dtrun::rdzv::detail::appendU64;
using dtrun::testing::RawClient;
using dtrun::testing::unhex;

namespace {

// The well-behaved client: a full round trip that must still succeed.
void requireServing(dtrun::rdzv::Store& store, int round) {
  const std::string key = "healthy/" + std::to_string(round);
  REQUIRE(store.set(key, "ok").isOk());
  REQUIRE(store.get(key).value() == "ok");
  REQUIRE(store.ping().isOk());
}

}  // namespace

TEST_CASE("random bytes close only the sender's connection", "[integration][rdzv][robustness]") {
  auto server = dtrun::testing::startServer();
  auto healthy = dtrun::testing::connect(server->port());
  std::mt19937 rng(20261121);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(1, 4096);
  for (int round = 0; round < 200; ++round) {
    RawClient garbage(server->port(), 200);
    std::string bytes(static_cast<std::size_t>(length(rng)), '\0');
    for (auto& b : bytes) {
      b = static_cast<char>(byte(rng));
    }
    garbage.send(bytes);
    if (round % 20 == 0) {
      requireServing(*healthy, round);
    }
  }
  requireServing(*healthy, -1);
}

TEST_CASE("a 2^60 length closes the connection without allocating it",
          "[integration][rdzv][robustness]") {
  auto server = dtrun::testing::startServer();
  auto healthy = dtrun::testing::connect(server->port());
  for (const char* opcode : {"00", "03", "05"}) {  // legacy SET key, legacy ADD key, CHECK count
    RawClient hostile(server->port());
    std::string wire = unhex(opcode);
    appendU64(wire, 1ULL << 60U);
    hostile.send(wire);
    CHECK(hostile.closedByPeer());
  }
  RawClient v2(server->port());
  std::string wire = unhex("00cef7853c01");  // VALIDATE, then SET with a huge value
  appendBytes(wire, "/k");
  appendU64(wire, 1ULL << 60U);
  v2.send(wire);
  CHECK(v2.closedByPeer());
  requireServing(*healthy, 0);
}

TEST_CASE("a WAIT_GET beside another pending wait closes that connection only",
          "[integration][rdzv][robustness]") {
  auto server = dtrun::testing::startServer();
  auto healthy = dtrun::testing::connect(server->port());
  // A release names no wait: with two pending the server could not tell which reply it owes.
  for (const bool waitFirst : {true, false}) {
    RawClient both(server->port());
    std::string wire = unhex("00cef7853c");  // VALIDATE
    const auto waitOn = [&wire](const char* key) {
      wire += unhex("06");  // WAIT, one key
      appendU64(wire, 1);
      appendBytes(wire, key);
    };
    const auto waitGetOn = [&wire](const char* key) {
      wire += unhex("a2");  // WAIT_GET
      appendBytes(wire, key);
    };
    if (waitFirst) {
      waitOn("/a");
      waitGetOn("/b");
    } else {
      waitGetOn("/b");
      waitOn("/a");
    }
    both.send(wire);
    CHECK(both.closedByPeer());
  }
  RawClient one(server->port());
  std::string wire = unhex("00cef7853c");
  wire += unhex("a2");
  appendBytes(wire, "/c");
  one.send(wire);
  REQUIRE(healthy->set("/c", "v").isOk());
  std::string expected = unhex("00");  // STOP_WAITING, then the value
  appendBytes(expected, "v");
  CHECK(one.recv(expected.size()) == expected);
  requireServing(*healthy, 0);
}

TEST_CASE("a value over the configured limit closes the connection",
          "[integration][rdzv][robustness]") {
  dtrun::rdzv::ServerOptions options;
  options.maxValueLength = 1024;
  auto server = dtrun::testing::startServer(options);
  auto healthy = dtrun::testing::connect(server->port());
  REQUIRE(healthy->set("fits", std::string(1024, 'x')).isOk());
  // SET has no reply: the server's close shows on the next call, which fails with a clear error;
  // the call after it reconnects.
  REQUIRE(healthy->set("big", std::string(1025, 'x')).isOk());
  const auto broken = healthy->get("fits");
  REQUIRE_FALSE(broken.isOk());
  CHECK_THAT(broken.status().message(), Catch::Contains("connection closed by the server"));
  CHECK(healthy->get("fits").value().size() == 1024);
  auto other = dtrun::testing::connect(server->port());
  CHECK_FALSE(other->check(std::vector<std::string>{"big"}).value());
}

TEST_CASE("a half-sent frame followed by a close leaves no trace",
          "[integration][rdzv][robustness]") {
  auto server = dtrun::testing::startServer();
  auto healthy = dtrun::testing::connect(server->port());
  for (int i = 0; i < 50; ++i) {
    RawClient partial(server->port());
    std::string wire = unhex("00");  // legacy SET "/half" = 1 MiB, cut short
    appendBytes(wire, "/half");
    appendU64(wire, 1 << 20);
    wire.append(1000, 'x');
    partial.send(wire);
  }
  requireServing(*healthy, 0);
  CHECK_FALSE(healthy->check(std::vector<std::string>{"/half"}).value());
  // A waiter that vanishes mid-wait is forgotten too.
  {
    RawClient waiter(server->port());
    std::string wait = unhex("05");
    appendU64(wait, 1);
    appendBytes(wait, "/w");
    waiter.send(wait);
  }
  requireServing(*healthy, 1);
  REQUIRE(healthy->set("/w", "x").isOk());
  requireServing(*healthy, 2);
}

TEST_CASE("1,000 idle connections do not stop the server answering",
          "[integration][rdzv][robustness]") {
  auto server = dtrun::testing::startServer();
  std::vector<std::unique_ptr<RawClient>> idle;
  idle.reserve(1000);
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(std::make_unique<RawClient>(server->port()));
  }
  auto healthy = dtrun::testing::connect(server->port());
  requireServing(*healthy, 0);
  // Half of them now speak, one byte at a time for the first request: fragmentation is fine.
  for (std::size_t i = 0; i < idle.size(); i += 2) {
    std::string wire = unhex("03");
    appendBytes(wire, "idle-counter");
    appendU64(wire, 1);
    for (const char c : wire) {
      idle[i]->send(std::string(1, c));
    }
  }
  for (std::size_t i = 0; i < idle.size(); i += 2) {
    REQUIRE(idle[i]->recv(8).size() == 8);
  }
  CHECK(healthy->add("idle-counter", 0).value() == 500);
  idle.clear();
  requireServing(*healthy, 1);
}
