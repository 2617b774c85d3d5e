// Our C++ client (torch >= 2.2 dialect) against our server, over loopback.
#include <atomic>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "support/test_form.h"
#include "support/test_support.h"

using namespace std::chrono_literals;
using dtrun::Errc;
using dtrun::testing::connect;
using dtrun::testing::startServer;

TEST_CASE("every client operation works against the server", "[integration][rdzv]") {
  auto server = startServer();
  auto store = connect(server->port());

  REQUIRE(store->set("k", "v").isOk());
  CHECK(store->get("k").value() == "v");
  CHECK(store->add("n", 5).value() == 5);
  CHECK(store->add("n", -7).value() == -2);
  CHECK(store->compareSet("cas", "", "v1").value() == "v1");
  CHECK(store->compareSet("cas", "wrong", "v2").value() == "v1");
  CHECK(store->compareSet("cas", "v1", "v2").value() == "v2");
  CHECK(store->compareSet("nokey", "x", "y").value() == "x");
  const std::vector<std::string> present{"k", "n"};
  const std::vector<std::string> partly{"k", "absent"};
  CHECK(store->check(present).value());
  CHECK_FALSE(store->check(partly).value());
  CHECK(store->wait(present, 1s).isOk());
  CHECK(store->numKeys().value() == 3);
  CHECK(store->deleteKey("cas").value());
  CHECK_FALSE(store->deleteKey("cas").value());
  REQUIRE(store->append("log", "a").isOk());
  REQUIRE(store->append("log", "b").isOk());
  CHECK(store->get("log").value() == "ab");
  const std::vector<std::string> keys{"m1", "m2"};
  const std::vector<std::string> values{"1", std::string(100000, 'x')};
  REQUIRE(store->multiSet(keys, values).isOk());
  CHECK(store->multiGet(keys).value() == values);
  CHECK(store->ping().isOk());
  REQUIRE(store->queuePush("q", "a").isOk());
  REQUIRE(store->queuePush("q", "b").isOk());
  CHECK(store->queueLen("q").value() == 2);
  CHECK(store->queuePop("q", 1s).value() == "a");
  CHECK(store->queuePop("q", 1s).value() == "b");
  auto listed = store->listKeys().value();
  std::sort(listed.begin(), listed.end());
  CHECK(listed == std::vector<std::string>{"k", "log", "m1", "m2", "n"});
  CHECK(store->barrier("solo", 1, 1s).isOk());
}

TEST_CASE("get blocks until another client sets the key", "[integration][rdzv]") {
  auto server = startServer();
  auto reader = connect(server->port());
  std::thread writer([port = server->port()] {
    auto store = connect(port);
    std::this_thread::sleep_for(100ms);
    static_cast<void>(store->set("late", "here"));
  });
  const auto start = std::chrono::steady_clock::now();
  const auto value = reader->get("late");
  writer.join();
  REQUIRE(value.isOk());
  CHECK(value.value() == "here");
  CHECK(std::chrono::steady_clock::now() - start >= 90ms);
}

TEST_CASE("a timed-out wait is cancelled and the connection stays usable", "[integration][rdzv]") {
  auto server = startServer();
  auto store = connect(server->port());
  const std::vector<std::string> never{"never", "other"};
  const auto status = store->wait(never, 150ms);
  CHECK(status.code() == Errc::kTimeout);
  CHECK_THAT(status.message(), Catch::Contains("wait([never, other])"));
  CHECK_THAT(status.message(), Catch::Contains("127.0.0.1:" + std::to_string(server->port())));
  CHECK_THAT(status.message(), Catch::Contains("150ms"));
  // Had the server kept the wait, this set would send a stale STOP_WAITING to `store`, and the
  // next reply would be misread (torch 1.13's desync).
  auto other = connect(server->port());
  REQUIRE(other->set("never", "1").isOk());
  REQUIRE(other->set("other", "1").isOk());
  CHECK(store->add("counter", 1).value() == 1);
  CHECK(store->get("never").value() == "1");
  CHECK(store->barrier("b", 2, 100ms).code() == Errc::kTimeout);
  CHECK(store->add("counter", 1).value() == 2);
}

TEST_CASE("wait_get answers with the value, waits for a late key, and times out cleanly",
          "[integration][rdzv]") {
  auto server = startServer();
  auto store = connect(server->port());
  REQUIRE(store->set("here", "v").isOk());
  REQUIRE(store->set("empty", "").isOk());
  CHECK(store->waitGet("here", 1s).value() == std::optional<std::string>("v"));
  CHECK(store->waitGet("empty", 1s).value() == std::optional<std::string>(""));

  std::thread writer([port = server->port()] {
    auto other = connect(port);
    std::this_thread::sleep_for(100ms);
    static_cast<void>(other->set("late", "there"));
  });
  const auto start = std::chrono::steady_clock::now();
  const auto late = store->waitGet("late", 10s);
  writer.join();
  CHECK(late.value() == std::optional<std::string>("there"));
  CHECK(std::chrono::steady_clock::now() - start >= 90ms);

  const auto timedOut = store->waitGet("never", 150ms);
  CHECK(timedOut.status().code() == Errc::kTimeout);
  CHECK_THAT(timedOut.status().message(), Catch::Contains("wait_get(never)"));
  CHECK_THAT(timedOut.status().message(), Catch::Contains("150ms"));
  // The cancelled wait must not answer later: the set below would otherwise put a stale reply
  // in front of the next ones.
  auto other = connect(server->port());
  REQUIRE(other->set("never", "1").isOk());
  CHECK(store->add("counter", 1).value() == 1);
  CHECK(store->waitGet("never", 1s).value() == std::optional<std::string>("1"));
  CHECK(store->add("counter", 1).value() == 2);
}

TEST_CASE("a barrier returns for everyone once the world has arrived", "[integration][rdzv]") {
  auto server = startServer();
  constexpr int kWorld = 8;
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int i = 0; i < kWorld; ++i) {
    threads.emplace_back([&, port = server->port()] {
      auto store = connect(port);
      if (store->barrier("all", kWorld, 10s).isOk()) {
        ++passed;
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  CHECK(passed == kWorld);
}

TEST_CASE("a blocking queue pop waits for a push", "[integration][rdzv]") {
  auto server = startServer();
  auto consumer = connect(server->port());
  CHECK(consumer->queuePop("jobs", 50ms).status().code() == Errc::kTimeout);
  std::thread producer([port = server->port()] {
    auto store = connect(port);
    std::this_thread::sleep_for(50ms);
    static_cast<void>(store->queuePush("jobs", "job-1"));
  });
  const auto item = consumer->queuePop("jobs", 5s);
  producer.join();
  CHECK(item.value() == "job-1");
}

TEST_CASE("try_get tells an absent key from an empty value without waiting",
          "[integration][rdzv]") {
  auto server = startServer();
  auto store = connect(server->port());
  CHECK_FALSE(store->tryGet("absent").value().has_value());
  REQUIRE(store->set("empty", "").isOk());
  REQUIRE(store->set("full", "v").isOk());
  CHECK(store->tryGet("empty").value() == std::optional<std::string>(""));
  CHECK(store->tryGet("full").value() == std::optional<std::string>("v"));
}

TEST_CASE("a batch pop drains what is queued, in order, and waits only for the first item",
          "[integration][rdzv]") {
  auto server = startServer();
  auto store = connect(server->port());
  CHECK(store->queuePopMany("inbox", 8, 50ms).status().code() == Errc::kTimeout);
  for (const char* item : {"1", "2", "3", "4", "5"}) {
    REQUIRE(store->queuePush("inbox", item).isOk());
  }
  CHECK(store->queuePopMany("inbox", 3, 1s).value() == std::vector<std::string>{"1", "2", "3"});
  CHECK(store->queuePopMany("inbox", 100, 1s).value() == std::vector<std::string>{"4", "5"});
  CHECK(store->queueLen("inbox").value() == 0);
  // The connection stays usable after the pipelined requests.
  REQUIRE(store->set("after", "ok").isOk());
  CHECK(store->get("after").value() == "ok");
}

TEST_CASE("connecting to a closed port fails at the deadline with a clear message",
          "[integration][rdzv]") {
  std::uint16_t port = 0;
  {
    auto server = startServer();
    port = server->port();
  }
  dtrun::rdzv::ClientOptions options;
  options.port = port;
  options.timeout = 300ms;
  const auto start = std::chrono::steady_clock::now();
  const auto store = dtrun::rdzv::connectStore(options);
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE_FALSE(store.isOk());
  CHECK(store.status().code() == Errc::kConnection);
  CHECK_THAT(store.status().message(),
             Catch::Contains("connect(127.0.0.1:" + std::to_string(port)));
  CHECK_THAT(store.status().message(), Catch::Contains("Connection refused"));
  CHECK_THAT(store.status().message(), Catch::Contains("attempts over 0.3s"));
  CHECK(took >= 250ms);
  CHECK(took < 5s);
}

TEST_CASE("a client reconnects on its next call after the connection broke",
          "[integration][rdzv]") {
  auto server = startServer();
  auto store = connect(server->port(), 2s);
  REQUIRE(store->set("k", "v").isOk());
  server->stop();
  CHECK_FALSE(store->get("k").isOk());
  dtrun::rdzv::ServerOptions again;
  again.host = "127.0.0.1";
  again.port = std::stoi(store->peer().substr(store->peer().rfind(':') + 1));
  auto restarted = dtrun::rdzv::StoreServer::start(again);
  REQUIRE(restarted.isOk());
  CHECK(store->set("k", "fresh").isOk());
  CHECK(store->get("k").value() == "fresh");
}

TEST_CASE("a client that disconnects while waiting leaves the server consistent",
          "[integration][rdzv]") {
  auto server = startServer();
  {
    auto waiter = connect(server->port());
    const std::vector<std::string> keys{"gone"};
    CHECK(waiter->wait(keys, 50ms).code() == Errc::kTimeout);
    std::thread blocked([port = server->port()] {
      auto store = connect(port);
      const std::vector<std::string> k{"gone"};
      static_cast<void>(store->wait(k, 100ms));  // times out, then the store closes
    });
    blocked.join();
  }
  auto store = connect(server->port());
  REQUIRE(store->set("gone", "now").isOk());
  CHECK(store->get("gone").value() == "now");
}

// The short form (support/test_form.h) keeps the 64 clients contending for one key, each for a
// tenth of the adds (1,000 each, 10,000 in the long form: 120 CPU-seconds under ASan).
TEST_CASE("64 concurrent clients adding to one key get an exact total",
          "[integration][rdzv][hammer]") {
  auto server = startServer();
  constexpr int kClients = 64;
  const int adds = dtrun::testing::longForm() ? 10000 : 1000;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kClients);
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c, port = server->port()] {
      try {
        auto store = connect(port, 60s);
        for (int i = 0; i < adds; ++i) {
          const auto r = store->add("counter", 1);
          if (!r.isOk()) {
            errors[c] = r.status().toString();
            return;
          }
        }
      } catch (const std::exception& e) {
        errors[c] = e.what();
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  for (const auto& error : errors) {
    CHECK(error.empty());
  }
  auto store = connect(server->port());
  CHECK(store->add("counter", 0).value() == std::int64_t{kClients} * adds);
}
