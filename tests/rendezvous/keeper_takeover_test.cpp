// A keeper run by an elected agent (runKeeper) and its successor: the etcd backend's keeper,
// here over a real dtrun store so the takeover logic is tested on its own. A keeper "dies" by
// being stopped; the next one starts from the state the first left in the store.
#include <atomic>
#include <future>
#include <thread>

#include <catch2/catch.hpp>

#include "dtrun/round.h"

#include "round_codec.h"
#include "support/keeper_thread.h"
#include "support/test_support.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;

RoundSettings settingsFor(int minNodes, int maxNodes, int maxRestarts = 0) {
  RoundSettings s;
  s.minNodes = minNodes;
  s.maxNodes = maxNodes;
  s.maxRestarts = maxRestarts;
  s.lastCallTimeout = milliseconds(200);
  s.joinTimeout = milliseconds(10000);
  s.closeTimeout = milliseconds(2000);
  s.keepAliveInterval = milliseconds(10000);  // heartbeats are not what these tests are about
  return s;
}

// A keeper over the dtrun store at `port`, as an elected agent runs it.
std::unique_ptr<testing::KeeperThread> keeperOn(std::uint16_t port, KeeperOptions options = {}) {
  ClientOptions client;
  client.port = port;
  client.timeout = std::chrono::seconds(10);
  return std::make_unique<testing::KeeperThread>(storeFactory(client), "job", std::move(options));
}

std::unique_ptr<RoundMember> memberOf(std::uint16_t port, const std::string& job,
                                      const RoundSettings& settings, const std::string& host,
                                      int workerStorePort = 0, bool storeHost = false,
                                      int nodeRankHint = -1) {
  ClientOptions options;
  options.port = port;
  options.timeout = std::chrono::seconds(5);
  NodeRecord self;
  self.agentId = host + ":1";
  self.host = host;
  self.workerStorePort = workerStorePort;
  self.storeHost = storeHost;
  self.nodeRankHint = nodeRankHint;
  auto m = RoundMember::connect(storeFactory(options), job, settings, self, false);
  REQUIRE(m.isOk());
  return std::move(m).value();
}

std::future<Result<JoinOutcome>> joinLater(RoundMember& m) {
  return std::async(std::launch::async, [&m] {
    const std::atomic<bool> cancel{false};
    return m.join(cancel, nullptr);
  });
}

JoinOutcome joined(std::future<Result<JoinOutcome>>& f) {
  auto r = f.get();
  if (!r.isOk()) {
    FAIL(r.status().toString());
  }
  return r.value();
}

KeeperOptions aliveOnly(const std::vector<std::string>& ids) {
  KeeperOptions o;
  o.aliveAgents = [ids]() -> Result<std::vector<std::string>> { return ids; };
  return o;
}

}  // namespace

TEST_CASE("a new keeper ends the round its lost node was in and carries the restart count",
          "[round][takeover]") {
  auto server = testing::startServer();
  const auto s = settingsFor(2, 3, 1);
  auto a = memberOf(server->port(), "job", s, "a");
  auto b = memberOf(server->port(), "job", s, "b");
  auto c = memberOf(server->port(), "job", s, "c");
  auto first = keeperOn(server->port());
  {
    auto fa = joinLater(*a);
    auto fb = joinLater(*b);
    auto fc = joinLater(*c);
    CHECK(joined(fa).assignment.nodeCount == 3);
    joined(fb);
    joined(fc);
  }
  // A failure: the restart is charged (attempt 1) and everyone joins round 1.
  RoundEnd failure;
  failure.kind = RoundEnd::Kind::kFailure;
  failure.message = "rank 0 failed";
  REQUIRE(a->endRound(failure).isOk());
  const std::atomic<bool> cancel{false};
  REQUIRE(b->waitEnd(cancel).isOk());
  REQUIRE(c->waitEnd(cancel).isOk());
  {
    auto fa = joinLater(*a);
    auto fb = joinLater(*b);
    auto fc = joinLater(*c);
    const auto oa = joined(fa);
    CHECK(oa.assignment.round == 1);
    CHECK(oa.assignment.attempt == 1);
    joined(fb);
    joined(fc);
  }
  // The keeper dies with node c; the successor sees c gone and ends round 1 (not charged).
  REQUIRE(first->stop().isOk());
  first.reset();
  c.reset();
  const auto second = keeperOn(server->port(), aliveOnly({"a:1", "b:1"}));
  auto end = a->waitEnd(cancel);
  REQUIRE(end.isOk());
  CHECK(end.value().kind == RoundEnd::Kind::kMembership);
  CHECK_THAT(end.value().message, Catch::Contains("(c) lost"));
  REQUIRE(b->waitEnd(cancel).isOk());
  auto fa = joinLater(*a);
  auto fb = joinLater(*b);
  const auto oa = joined(fa);
  const auto ob = joined(fb);
  REQUIRE_FALSE(oa.closed);
  CHECK(oa.assignment.round == 2);
  CHECK(oa.assignment.attempt == 1);  // the membership change was not charged
  CHECK(oa.assignment.nodeCount == 2);
  CHECK(ob.assignment.nodeCount == 2);
}

TEST_CASE("a keeper lost while its round gathered: the nodes that joined join the next round",
          "[round][takeover]") {
  auto server = testing::startServer();
  const auto s = settingsFor(3, 3);
  auto a = memberOf(server->port(), "job", s, "a");
  auto b = memberOf(server->port(), "job", s, "b");
  auto first = keeperOn(server->port());
  auto fa = joinLater(*a);
  auto fb = joinLater(*b);
  // Both joins reach the first keeper's memory (the round's status line says so), then it dies.
  auto probe = testing::connect(server->port());
  const detail::RoundKeys keys("job");
  REQUIRE(testing::waitUntil(
      [&] {
        auto n = probe->add(keys.arrivals(0), 0);
        return n.isOk() && n.value() == 2;
      },
      std::chrono::seconds(5)));
  std::this_thread::sleep_for(milliseconds(300));
  REQUIRE(first->stop().isOk());
  first.reset();
  const auto second = keeperOn(server->port(), aliveOnly({"a:1", "b:1", "c:1"}));
  auto c = memberOf(server->port(), "job", s, "c");
  auto fc = joinLater(*c);
  const auto oa = joined(fa);
  const auto ob = joined(fb);
  const auto oc = joined(fc);
  for (const auto* o : {&oa, &ob, &oc}) {
    REQUIRE_FALSE(o->closed);
    CHECK(o->assignment.round == 1);
    CHECK(o->assignment.nodeCount == 3);
  }
}

TEST_CASE("a round that holds the store's host gives its workers the job's store",
          "[round][takeover]") {
  // c10d on an agent's store: the other node serves a workers' store too (it cannot know the
  // job's store is no shared `dtrun store`), and is node 0 by its --node_rank, but the host's
  // store is the job's own.
  auto server = testing::startServer();
  const auto s = settingsFor(2, 2);
  auto a = memberOf(server->port(), "job", s, "a", 0, true);
  auto b = memberOf(server->port(), "job", s, "b", 4200, false, 0);
  const auto keeper = keeperOn(server->port());
  auto fa = joinLater(*a);
  auto fb = joinLater(*b);
  const auto oa = joined(fa);
  const auto ob = joined(fb);
  CHECK(ob.assignment.nodeRank == 0);
  for (const auto* o : {&oa, &ob}) {
    CHECK(o->assignment.masterPort == 0);
    CHECK(o->assignment.masterAddr.empty());
  }
}

TEST_CASE("a lost agent ends its round at once, the workers' store is node 0's",
          "[round][takeover]") {
  auto server = testing::startServer();
  const auto s = settingsFor(2, 2);
  auto a = memberOf(server->port(), "job", s, "a", 4100);
  auto b = memberOf(server->port(), "job", s, "b", 4200);
  const auto keeper = keeperOn(server->port());
  auto fa = joinLater(*a);
  auto fb = joinLater(*b);
  const auto oa = joined(fa);
  const auto ob = joined(fb);
  const auto& zero = oa.assignment.nodeRank == 0 ? oa : ob;
  CHECK(oa.assignment.masterAddr == zero.assignment.masterAddr);
  CHECK(ob.assignment.masterPort == (zero.assignment.masterAddr == "a" ? 4100 : 4200));
  CHECK(oa.assignment.masterPort == ob.assignment.masterPort);

  auto store = testing::connect(server->port());
  REQUIRE(reportLost(*store, "job", "b:1", "its etcd lease expired").isOk());
  const std::atomic<bool> cancel{false};
  auto end = a->waitEnd(cancel);
  REQUIRE(end.isOk());
  CHECK(end.value().kind == RoundEnd::Kind::kMembership);
  CHECK_THAT(end.value().message, Catch::Contains("(b) lost: its etcd lease expired"));
  // One node left of the two required: the job is over for a.
  auto next = a->join(cancel, nullptr);
  REQUIRE(next.isOk());
  CHECK(next.value().closed);
}

}  // namespace dtrun::rdzv
