// The round protocol against a real store and keeper service: nodes are threads, each with its
// own RoundMember (two real connections), as agents would use it.
#include "dtrun/round.h"

#include <array>
#include <atomic>
#include <future>
#include <set>
#include <thread>

#include <catch2/catch.hpp>

#include "round_codec.h"
#include "support/test_support.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;

RoundSettings fastSettings(int minNodes, int maxNodes) {
  RoundSettings s;
  s.minNodes = minNodes;
  s.maxNodes = maxNodes;
  s.lastCallTimeout = milliseconds(200);
  s.joinTimeout = milliseconds(10000);
  s.closeTimeout = milliseconds(2000);
  s.keepAliveInterval = milliseconds(1000);  // tests that beat make it shorter
  s.keepAliveMaxAttempt = 3;
  return s;
}

struct Cluster {
  std::unique_ptr<StoreServer> server = testing::startServer();
  std::unique_ptr<KeeperService> keepers = startKeepers(server->port());

  static std::unique_ptr<KeeperService> startKeepers(std::uint16_t port) {
    auto k = KeeperService::start(port);
    if (!k.isOk()) {
      throw std::runtime_error(k.status().toString());
    }
    return std::move(k).value();
  }

  std::unique_ptr<RoundMember> member(const std::string& job, const RoundSettings& settings,
                                      const std::string& host, int nproc = 1, int hint = -1) {
    ClientOptions options;
    options.port = server->port();
    options.timeout = std::chrono::seconds(5);
    NodeRecord self;
    self.agentId = host + ":1";
    self.host = host;
    self.nproc = nproc;
    self.nodeRankHint = hint;
    auto m = RoundMember::connect(options, job, settings, self);
    REQUIRE(m.isOk());
    return std::move(m).value();
  }
};

JoinOutcome joinNow(RoundMember& m) {
  const std::atomic<bool> cancel{false};
  auto outcome = m.join(cancel, nullptr);
  if (!outcome.isOk()) {
    FAIL(outcome.status().toString());
  }
  return outcome.value();
}

// Joins every member concurrently; returns the outcomes in member order.
std::vector<JoinOutcome> joinAll(const std::vector<RoundMember*>& members) {
  std::vector<std::future<JoinOutcome>> futures;
  for (auto* m : members) {
    futures.push_back(std::async(std::launch::async, [m] {
      const std::atomic<bool> cancel{false};
      auto outcome = m->join(cancel, nullptr);
      return outcome.isOk() ? outcome.value() : JoinOutcome{true, {}, RoundEnd{}};
    }));
  }
  std::vector<JoinOutcome> out;
  for (auto& f : futures) {
    out.push_back(f.get());
  }
  return out;
}

}  // namespace

TEST_CASE("nodes with different nproc get prefix-sum ranks and hints are honoured", "[round]") {
  Cluster c;
  const auto s = fastSettings(3, 3);
  auto a = c.member("job", s, "a", 2);
  auto b = c.member("job", s, "b", 3, 0);
  auto d = c.member("job", s, "d", 1);
  const auto out = joinAll({a.get(), b.get(), d.get()});
  std::set<int> nodeRanks;
  for (const auto& o : out) {
    REQUIRE_FALSE(o.closed);
    CHECK(o.assignment.worldSize == 6);
    CHECK(o.assignment.nodeCount == 3);
    nodeRanks.insert(o.assignment.nodeRank);
  }
  CHECK(nodeRanks == std::set<int>{0, 1, 2});
  CHECK(out[1].assignment.nodeRank == 0);  // b asked for node rank 0
  CHECK(out[1].assignment.rankOffset == 0);
  // Offsets are prefix sums of the nproc of the nodes ranked before.
  const std::array nproc{2, 3, 1};
  std::array<int, 3> byRank{};
  for (std::size_t i = 0; i < 3; ++i) {
    byRank.at(static_cast<std::size_t>(out[i].assignment.nodeRank)) = static_cast<int>(i);
  }
  int offset = 0;
  for (const int who : byRank) {
    CHECK(out[static_cast<std::size_t>(who)].assignment.rankOffset == offset);
    offset += nproc.at(static_cast<std::size_t>(who));
  }
}

TEST_CASE("a failure ends the round for everyone and the restart budget is job-wide", "[round]") {
  Cluster c;
  auto s = fastSettings(2, 2);
  s.maxRestarts = 1;
  auto a = c.member("job", s, "a");
  auto b = c.member("job", s, "b");
  auto first = joinAll({a.get(), b.get()});
  CHECK(first[0].assignment.attempt == 0);

  auto waiting = std::async(std::launch::async, [&] {
    const std::atomic<bool> cancel{false};
    return b->waitEnd(cancel);
  });
  RoundEnd failure{RoundEnd::Kind::kFailure, "rank 1 failed", "{}", 7};
  REQUIRE(a->endRound(failure).isOk());
  auto seen = waiting.get();
  REQUIRE(seen.isOk());
  CHECK(seen.value().kind == RoundEnd::Kind::kFailure);
  CHECK(seen.value().exitCode == 7);

  auto second = joinAll({a.get(), b.get()});
  REQUIRE_FALSE(second[0].closed);
  CHECK(second[0].assignment.attempt == 1);
  CHECK(second[1].assignment.round == 1);

  // The second failure uses up the budget: the next join learns the job is over.
  REQUIRE(b->endRound(RoundEnd{RoundEnd::Kind::kFailure, "rank 0 failed", "{}", 3}).isOk());
  auto third = joinAll({a.get(), b.get()});
  for (const auto& o : third) {
    REQUIRE(o.closed);
    CHECK(o.end.kind == RoundEnd::Kind::kClosed);
    CHECK(o.end.exitCode == 3);
    CHECK_THAT(o.end.message, Catch::Contains("no restarts left"));
  }
}

TEST_CASE("the keeper stops a crash loop, and a rank that asks not to be restarted", "[round]") {
  Cluster c;
  auto s = fastSettings(2, 2);
  s.maxRestarts = 10;
  s.maxNoProgress = 2;
  auto a = c.member("loop", s, "a");
  auto b = c.member("loop", s, "b");
  RoundEnd stuck{RoundEnd::Kind::kFailure, "rank 1 failed", "{}", 7};
  stuck.progressed = false;
  RoundEnd moving = stuck;
  moving.progressed = true;
  // no progress, progress (the streak starts over), no progress: still restarting.
  for (const RoundEnd& end : {stuck, moving, stuck}) {
    auto round = joinAll({a.get(), b.get()});
    REQUIRE_FALSE(round[0].closed);
    REQUIRE(a->endRound(end).isOk());
  }
  auto fourth = joinAll({a.get(), b.get()});
  REQUIRE_FALSE(fourth[0].closed);
  CHECK(fourth[0].assignment.attempt == 3);
  REQUIRE(b->endRound(stuck).isOk());  // the second in a row: the job stops, budget or not
  for (const auto& o : joinAll({a.get(), b.get()})) {
    REQUIRE(o.closed);
    CHECK(o.end.exitCode == kExitNoProgress);
    CHECK_THAT(o.end.message,
               Catch::Contains("2 attempts in a row made no progress (max_no_progress=2)"));
  }

  auto x = c.member("asked", s, "x");
  auto y = c.member("asked", s, "y");
  joinAll({x.get(), y.get()});
  RoundEnd asked{RoundEnd::Kind::kFailure, "rank 0 failed", "{}", 87};
  asked.noRestart = true;
  REQUIRE(x->endRound(asked).isOk());
  for (const auto& o : joinAll({x.get(), y.get()})) {
    REQUIRE(o.closed);
    CHECK(o.end.exitCode == 87);
    CHECK_THAT(o.end.message, Catch::Contains("the failed rank asked not to be restarted"));
  }
  // Both fields travel; an older agent's end (without them) means progress and restarts.
  const auto decoded = detail::decodeEnd(detail::encodeEnd(asked));
  REQUIRE(decoded);
  CHECK(decoded->noRestart);
  CHECK(decoded->progressed);
  const auto old =
      detail::decodeEnd(R"({"kind":"failure","message":"m","detail":"","exit_code":3})");
  REQUIRE(old);
  CHECK(old->progressed);
  CHECK_FALSE(old->noRestart);
}

TEST_CASE("a silent node is declared dead and the survivors re-rendezvous", "[round]") {
  Cluster c;
  auto s = fastSettings(2, 3);
  s.keepAliveInterval = milliseconds(100);
  auto a = c.member("job", s, "a");
  auto b = c.member("job", s, "b");
  auto d = c.member("job", s, "d");
  joinAll({a.get(), b.get(), d.get()});
  std::atomic<bool> stop{false};
  std::thread beats([&] {
    while (!stop.load()) {
      static_cast<void>(a->heartbeat());
      static_cast<void>(b->heartbeat());
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  const std::atomic<bool> cancel{false};
  auto end = a->waitEnd(cancel);  // d never beats
  stop = true;
  beats.join();
  REQUIRE(end.isOk());
  CHECK(end.value().kind == RoundEnd::Kind::kMembership);
  CHECK_THAT(end.value().message, Catch::Contains("(d) lost: no heartbeat"));
  auto next = joinAll({a.get(), b.get()});
  CHECK(next[0].assignment.nodeCount == 2);
  CHECK(next[0].assignment.attempt == 0);  // not charged
}

TEST_CASE("a late node grows an elastic job, beyond max it waits as a spare", "[round]") {
  Cluster c;
  auto s = fastSettings(1, 2);
  s.lastCallTimeout = milliseconds(2000);  // time for the node that left round 0 to come back
  auto a = c.member("job", s, "a");
  auto first = joinNow(*a);
  CHECK(first.assignment.nodeCount == 1);

  auto b = c.member("job", s, "b");
  auto bJoin = std::async(std::launch::async, [&] { return joinNow(*b); });
  const std::atomic<bool> cancel{false};
  auto end = a->waitEnd(cancel);
  REQUIRE(end.isOk());
  CHECK(end.value().kind == RoundEnd::Kind::kMembership);
  auto aJoin = joinNow(*a);
  CHECK(aJoin.assignment.nodeCount == 2);
  CHECK(bJoin.get().assignment.nodeCount == 2);

  // A third node finds the job at max: it waits, and fills in when a node leaves.
  auto d = c.member("job", s, "d");
  auto dJoin = std::async(std::launch::async, [&] { return joinNow(*d); });
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(dJoin.wait_for(milliseconds(0)) == std::future_status::timeout);
  REQUIRE(b->leave("test").isOk());
  auto again = joinNow(*a);
  CHECK(again.assignment.nodeCount == 2);
  const auto dOutcome = dJoin.get();
  CHECK_FALSE(dOutcome.closed);
  CHECK(dOutcome.assignment.nodeCount == 2);
  CHECK(dOutcome.assignment.worldSize == 2);
}

TEST_CASE("success needs every node: the exit barrier finishes the keeper", "[round]") {
  Cluster c;
  const auto s = fastSettings(2, 2);
  auto a = c.member("job", s, "a");
  auto b = c.member("job", s, "b");
  joinAll({a.get(), b.get()});
  REQUIRE(a->done().isOk());
  REQUIRE(b->done().isOk());
  const std::atomic<bool> cancel{false};
  auto end = b->waitEnd(cancel);
  REQUIRE(end.isOk());
  CHECK(end.value().kind == RoundEnd::Kind::kSuccess);
  REQUIRE(a->bye().isOk());
  REQUIRE(b->bye().isOk());
  CHECK(a->waitFinished(milliseconds(5000)).isOk());
}

TEST_CASE("a spare learns that the job succeeded without it, its bye does not end the barrier",
          "[round]") {
  Cluster c;
  const auto s = fastSettings(1, 1);
  auto a = c.member("job", s, "a");
  REQUIRE_FALSE(joinNow(*a).closed);
  auto spare = c.member("job", s, "spare");
  auto spareJoin = std::async(std::launch::async, [&] { return joinNow(*spare); });
  std::this_thread::sleep_for(milliseconds(300));
  REQUIRE(a->done().isOk());
  const auto outcome = spareJoin.get();
  CHECK(outcome.closed);
  CHECK(outcome.end.kind == RoundEnd::Kind::kSuccess);
  CHECK(outcome.end.exitCode == 0);
  REQUIRE(spare->bye().isOk());
  // The member has not passed the exit barrier yet: the keeper keeps the store's job open.
  CHECK(a->waitFinished(milliseconds(300)).code() == dtrun::Errc::kTimeout);
  REQUIRE(a->bye().isOk());
  CHECK(a->waitFinished(milliseconds(5000)).isOk());
}

TEST_CASE("nodes leaving after the job closed count as gone: the keeper finishes at once",
          "[round]") {
  // Every agent signalled at once (a launcher's Ctrl-C): a's leave drops the job below its
  // minimum and closes it; b's and d's leaves arrive after that and must count as their byes.
  Cluster c;
  auto s = fastSettings(3, 3);
  s.closeTimeout = milliseconds(20000);
  auto a = c.member("job", s, "a");
  auto b = c.member("job", s, "b");
  auto d = c.member("job", s, "d");
  joinAll({a.get(), b.get(), d.get()});
  REQUIRE(a->leave("SIGTERM").isOk());
  const std::atomic<bool> cancel{false};
  auto end = b->waitEnd(cancel);
  REQUIRE(end.isOk());
  CHECK_THAT(end.value().message, Catch::Contains("(a) left the job"));
  std::this_thread::sleep_for(milliseconds(200));  // the keeper closes the job first
  REQUIRE(b->leave("SIGTERM").isOk());
  REQUIRE(d->leave("SIGTERM").isOk());
  CHECK(b->waitFinished(milliseconds(3000)).isOk());

  // A node that joins again now (the keeper had called it lost while it was away) is answered by
  // nobody: its join learns from the store that the job finished, well before join_timeout.
  const auto late = a->join(cancel, nullptr);
  REQUIRE(late.isOk());
  CHECK(late.value().closed);
  CHECK(late.value().end.kind == RoundEnd::Kind::kClosed);
  CHECK_THAT(late.value().end.message, Catch::Contains("the job finished while this node joined"));
}

TEST_CASE("a round that cannot close names a few of the nodes it has, not all of them", "[round]") {
  // At 4,096 nodes the timeout's error quoted every arrived host: a line of 40 KB.
  Cluster c;
  auto settings = fastSettings(11, 11);
  // Well past the keeper's first status line (5 s after the round opened), also under TSan.
  settings.joinTimeout = milliseconds(9000);
  std::vector<std::unique_ptr<RoundMember>> members;
  for (int i = 0; i < 10; ++i) {
    members.push_back(c.member("few-names", settings, "node" + std::to_string(i)));
  }
  std::vector<std::future<Status>> joins;
  for (auto& m : members) {
    joins.push_back(std::async(std::launch::async, [&m] {
      const std::atomic<bool> cancel{false};
      return m->join(cancel, nullptr).status();
    }));
  }
  for (auto& j : joins) {
    const Status s = j.get();
    CHECK(s.code() == Errc::kTimeout);
    CHECK_THAT(s.message(), Catch::Contains("waiting for 1 of 11 nodes (10 arrived: ") &&
                                Catch::Contains(" and 2 more)"));
    CHECK(s.message().size() < 400);
  }
}

TEST_CASE("round codec rejects malformed values and orders nodes", "[round]") {
  CHECK_FALSE(detail::decodeRecord("{").has_value());
  CHECK_FALSE(detail::decodeRecord("[]").has_value());
  CHECK_FALSE(detail::decodeEnd("{\"kind\":\"x\"}").has_value());
  CHECK_FALSE(detail::decodeAssign("null").has_value());
  CHECK_FALSE(detail::decodeMessage("join x").has_value());
  std::vector<NodeRecord> nodes(4);
  nodes[0].host = "w0";
  nodes[1].host = "host";
  nodes[1].storeHost = true;
  nodes[2].host = "hinted";
  nodes[2].nodeRankHint = 3;
  nodes[3].host = "sched";
  nodes[3].schedulerOrder = 0;
  const auto order = detail::orderNodes(nodes, 4);
  REQUIRE(order.size() == 4);
  CHECK(order[0] == 1);  // the store host
  CHECK(order[1] == 3);  // scheduler order before plain arrival
  CHECK(order[2] == 0);
  CHECK(order[3] == 2);  // its hint
}

}  // namespace dtrun::rdzv
