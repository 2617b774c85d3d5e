// Grouped joins (dtrun/group_relay.h) against a real store and keeper service: nodes are
// threads, each with its own member; leaders run real relays with their own stores.
#include "dtrun/group_relay.h"

#include <future>
#include <set>

#include <catch2/catch.hpp>

#include "round_codec.h"
#include "support/test_support.h"

namespace dtrun::rdzv {
namespace {

using std::chrono::milliseconds;

RoundSettings groupedSettings(int nodes) {
  RoundSettings s;
  s.minNodes = nodes;
  s.maxNodes = nodes;
  s.maxRestarts = 1;
  s.lastCallTimeout = milliseconds(200);
  s.joinTimeout = milliseconds(10000);
  s.closeTimeout = milliseconds(3000);
  s.keepAliveInterval = milliseconds(1000);
  return s;
}

// A job's store and keeper service, as the store's host runs them.
class GroupedJob {
 public:
  GroupedJob() {
    auto k = KeeperService::start(server_->port());
    REQUIRE(k.isOk());
    keepers_ = std::move(k).value();
    options_.port = server_->port();
    options_.timeout = std::chrono::seconds(5);
  }

  std::unique_ptr<RoundMember> member(const std::string& host, int groupSize, bool storeHost,
                                      const RoundSettings& settings) {
    NodeRecord self;
    self.agentId = host + ":1";
    self.host = host;
    self.storeHost = storeHost;
    GroupOptions group;
    group.size = groupSize;
    group.listenHost = "127.0.0.1";
    group.advertiseHost = "127.0.0.1";
    auto m = connectGroupMember(options_, "job", settings, self, group);
    if (!m.isOk()) {
      FAIL(m.status().toString());
    }
    return std::move(m).value();
  }

  [[nodiscard]] std::unique_ptr<Store> client() const {
    auto c = connectStore(options_);
    REQUIRE(c.isOk());
    return std::move(c).value();
  }

 private:
  std::unique_ptr<StoreServer> server_ = testing::startServer();
  std::unique_ptr<KeeperService> keepers_;
  ClientOptions options_;
};

std::vector<JoinOutcome> joinGroups(const std::vector<std::unique_ptr<RoundMember>>& members) {
  std::vector<std::future<Result<JoinOutcome>>> futures;
  for (const auto& m : members) {
    futures.push_back(std::async(std::launch::async, [&m] {
      const std::atomic<bool> cancel{false};
      return m->join(cancel, nullptr);
    }));
  }
  std::vector<JoinOutcome> out;
  for (auto& f : futures) {
    auto outcome = f.get();
    if (!outcome.isOk()) {
      FAIL(outcome.status().toString());
    }
    out.push_back(std::move(outcome).value());
  }
  return out;
}

RoundEnd endSeenBy(RoundMember& m) {
  const std::atomic<bool> cancel{false};
  auto end = m.waitEnd(cancel);
  if (!end.isOk()) {
    FAIL(end.status().toString());
  }
  return end.value();
}

void checkGroupedRanks(const std::vector<JoinOutcome>& outcomes, int attempt) {
  std::set<int> ranks;
  std::set<int> offsets;
  for (const auto& o : outcomes) {
    REQUIRE_FALSE(o.closed);
    CHECK(o.assignment.attempt == attempt);
    CHECK(o.assignment.nodeCount == static_cast<int>(outcomes.size()));
    CHECK(o.assignment.worldSize == static_cast<int>(outcomes.size()));
    ranks.insert(o.assignment.nodeRank);
    offsets.insert(o.assignment.rankOffset);
  }
  CHECK(ranks.size() == outcomes.size());
  CHECK(offsets.size() == outcomes.size());
  CHECK(*ranks.rbegin() == static_cast<int>(outcomes.size()) - 1);
  CHECK(outcomes.front().assignment.nodeRank == 0);  // the store's host
}

}  // namespace

TEST_CASE("grouped joins: ranks for all, a failure restarts every group, success ends the job",
          "[round][group]") {
  GroupedJob job;
  const auto s = groupedSettings(8);
  // The store's host joins at its store; seven nodes in groups of three: n1, n4 and n7 lead.
  std::vector<std::unique_ptr<RoundMember>> nodes;
  nodes.push_back(job.member("h", 3, true, s));
  for (int i = 1; i <= 7; ++i) {
    nodes.push_back(job.member("n" + std::to_string(i), 3, false, s));
  }
  checkGroupedRanks(joinGroups(nodes), 0);

  auto store = job.client();
  for (int g = 0; g < 3; ++g) {
    CHECK(store->tryGet(detail::RoundKeys("job").group(g)).value());
  }
  CHECK_FALSE(store->tryGet(detail::RoundKeys("job").group(3)).value());
  CHECK(store->add(detail::RoundKeys("job").groupTickets(), 0).value() == 7);

  // A member of the second group fails: the store's host and the third group hear of it.
  RoundEnd failure{RoundEnd::Kind::kFailure, "rank 5 failed", "{}", 7};
  REQUIRE(nodes[5]->endRound(failure).isOk());
  for (const std::size_t i : {0, 7, 2}) {
    const auto end = endSeenBy(*nodes[i]);
    CHECK(end.kind == RoundEnd::Kind::kFailure);
    CHECK(end.message == "rank 5 failed");
  }
  checkGroupedRanks(joinGroups(nodes), 1);

  for (const auto& n : nodes) {
    REQUIRE(n->done().isOk());
  }
  CHECK(endSeenBy(*nodes[0]).kind == RoundEnd::Kind::kSuccess);
  CHECK(endSeenBy(*nodes[6]).kind == RoundEnd::Kind::kSuccess);
  // Leaders' byes wait for their members': those of the others go first, as they do in a job,
  // where every agent says its own at once.
  for (const std::size_t i : {2, 3, 5, 6, 0, 1, 4, 7}) {
    REQUIRE(nodes[i]->bye().isOk());
  }
  CHECK(nodes[0]->waitFinished(milliseconds(5000)).isOk());
}

TEST_CASE("grouped joins: a member that falls silent is lost, its group's others go on",
          "[round][group]") {
  GroupedJob job;
  auto s = groupedSettings(4);
  s.minNodes = 3;
  s.keepAliveInterval = milliseconds(100);
  std::vector<std::unique_ptr<RoundMember>> nodes;
  nodes.push_back(job.member("h", 2, true, s));
  for (int i = 1; i <= 3; ++i) {
    nodes.push_back(job.member("n" + std::to_string(i), 2, false, s));
  }
  checkGroupedRanks(joinGroups(nodes), 0);
  std::atomic<bool> stop{false};
  // Pointers, not indices: n2 leaves `nodes` below while the others go on beating.
  const std::vector<RoundMember*> beating{nodes[0].get(), nodes[1].get(), nodes[3].get()};
  std::thread beats([&] {
    while (!stop.load()) {
      for (RoundMember* m : beating) {  // n2 (in n1's group) never beats
        static_cast<void>(m->heartbeat());
      }
      std::this_thread::sleep_for(milliseconds(30));
    }
  });
  const auto end = endSeenBy(*nodes[3]);
  CHECK(end.kind == RoundEnd::Kind::kMembership);
  CHECK_THAT(end.message, Catch::Contains("(n2) lost: no heartbeat"));
  nodes.erase(nodes.begin() + 2);
  const auto next = joinGroups(nodes);
  stop = true;
  beats.join();
  checkGroupedRanks(next, 0);  // not charged
}

TEST_CASE("grouped joins: the store's host joins flat, and a group of one is flat",
          "[round][group]") {
  GroupedJob job;
  const auto s = groupedSettings(1);
  auto host = job.member("h", 4, true, s);
  CHECK_FALSE(job.client()->tryGet(detail::RoundKeys("job").groupTickets()).value());
  auto other = job.member("x", 1, false, s);  // a group size below 2: no groups
  CHECK_FALSE(job.client()->tryGet(detail::RoundKeys("job").groupTickets()).value());
}

}  // namespace dtrun::rdzv
