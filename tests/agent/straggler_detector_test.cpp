// The straggler judgement on made-up entry times: a rank that enters collectives late is named
// once, with how late; noise under the threshold names nobody; a node whose report is missing or
// comes a call later holds the judgement back rather than skewing it; a rank that catches up
// recovers; a new attempt starts over.
#include "live/straggler_detector.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

#include "live/node_status.h"

namespace straggler_test {

using dtrun::agent::detail::NodeStatus;
using dtrun::agent::detail::RankStatus;
using dtrun::agent::detail::StragglerDetector;

constexpr std::int64_t kSecond = 1'000'000'000;
constexpr std::int64_t kStart = 1'700'000'000 * kSecond;

// Two nodes of four ranks; rank r enters operation n at n seconds plus lateNs(r, n).
template <typename Late>
std::vector<NodeStatus> job(std::uint64_t firstOp, std::uint64_t lastOp, Late lateNs,
                            int attempt = 0) {
  std::vector<NodeStatus> nodes(2);
  for (int node = 0; node < 2; ++node) {
    NodeStatus& n = nodes[static_cast<std::size_t>(node)];
    n.nodeRank = node;
    n.nodeCount = 2;
    n.host = "host" + std::to_string(node);
    n.attempt = attempt;
    for (int local = 0; local < 4; ++local) {
      RankStatus r;
      r.rank = node * 4 + local;
      r.localRank = local;
      for (std::uint64_t op = firstOp; op <= lastOp; ++op) {
        r.entryTimes.emplace_back(
            op, kStart + static_cast<std::int64_t>(op) * kSecond + lateNs(r.rank, op));
      }
      r.ops = lastOp;
      n.ranks.push_back(r);
    }
  }
  return nodes;
}

const RankStatus& rankOf(const std::vector<NodeStatus>& nodes, int rank) {
  return nodes[static_cast<std::size_t>(rank / 4)].ranks[static_cast<std::size_t>(rank % 4)];
}

TEST_CASE("a rank that reaches collectives late is named once, with how late", "[unit][live]") {
  StragglerDetector detector(std::chrono::milliseconds(200), 50);
  const auto late = [](int rank, std::uint64_t op) {
    return (rank == 5 ? 700'000'000 : 0) + static_cast<std::int64_t>(op % 3) * 1'000'000;
  };
  auto nodes = job(1, 4, late);
  CHECK(detector.observe(nodes).empty());  // 4 late operations: not yet 5 (a tenth of 50)
  CHECK_FALSE(rankOf(nodes, 5).straggler);
  nodes = job(5, 12, late);
  const auto named = detector.observe(nodes);
  REQUIRE(named.size() == 1);
  CHECK(named[0].rank == 5);
  CHECK(named[0].nodeRank == 1);
  CHECK(named[0].host == "host1");
  CHECK(named[0].lateSeconds == Approx(0.7).margin(0.01));
  CHECK(named[0].lateCount == 12);
  CHECK(named[0].judged == 12);
  CHECK(rankOf(nodes, 5).straggler);
  CHECK(rankOf(nodes, 5).lateSeconds.value_or(0) == Approx(0.7).margin(0.01));
  CHECK_FALSE(rankOf(nodes, 0).straggler);
  CHECK(rankOf(nodes, 0).lateSeconds.value_or(-1) == 0.0);
  nodes = job(13, 20, late);
  CHECK(detector.observe(nodes).empty());  // named once
  CHECK(rankOf(nodes, 5).straggler);
  REQUIRE(detector.current().size() == 1);
  CHECK(detector.current()[0].judged == 20);
}

TEST_CASE("jitter under the threshold names nobody", "[unit][live]") {
  StragglerDetector detector(std::chrono::milliseconds(200), 20);
  // Every rank in turn arrives last, by 150 ms: under the threshold.
  const auto jitter = [](int rank, std::uint64_t op) {
    return static_cast<std::uint64_t>(rank) == op % 8 ? 150'000'000 : 0;
  };
  auto nodes = job(1, 30, jitter);
  CHECK(detector.observe(nodes).empty());
  for (int rank = 0; rank < 8; ++rank) {
    CHECK_FALSE(rankOf(nodes, rank).straggler);
  }
  CHECK(detector.current().empty());
}

TEST_CASE("two late ranks are both named, a one-off pause is not", "[unit][live]") {
  StragglerDetector detector(std::chrono::milliseconds(200), 20);
  const auto late = [](int rank, std::uint64_t op) -> std::int64_t {
    if (rank == 2 || rank == 6) {
      return 400'000'000;
    }
    return rank == 3 && op == 7 ? 900'000'000 : 0;  // one garbage-collection pause
  };
  auto nodes = job(1, 20, late);
  const auto named = detector.observe(nodes);
  REQUIRE(named.size() == 2);
  CHECK(named[0].rank == 2);
  CHECK(named[1].rank == 6);
  CHECK_FALSE(rankOf(nodes, 3).straggler);
  CHECK(rankOf(nodes, 3).lateSeconds.value_or(-1) == 0.0);  // late once: not a figure to show
  CHECK(rankOf(nodes, 2).lateSeconds.value_or(0) == Approx(0.4).margin(0.01));
}

TEST_CASE("an incomplete job is not judged, and a node's late report still counts",
          "[unit][live]") {
  StragglerDetector detector(std::chrono::milliseconds(200), 50);
  const auto late = [](int rank, std::uint64_t) -> std::int64_t {
    return rank == 1 ? 500'000'000 : 0;
  };
  auto nodes = job(1, 10, late);
  std::vector<NodeStatus> onlyFirst{nodes[0]};
  CHECK(detector.observe(onlyFirst).empty());  // node 1 not heard from yet
  CHECK_FALSE(onlyFirst[0].ranks[1].lateSeconds);
  // Node 1's report is older: it stops at operation 6; node 0's goes on to 10.
  auto ahead = job(1, 10, late);
  auto behind = job(1, 6, late);
  std::vector<NodeStatus> mixed{ahead[0], behind[1]};
  const auto named = detector.observe(mixed);
  REQUIRE(named.size() == 1);
  CHECK(named[0].rank == 1);
  CHECK(named[0].judged == 6);
  // Operations 7-10 are judged once node 1's report has them.
  auto later = job(7, 10, late);
  detector.observe(later);
  REQUIRE(detector.current().size() == 1);
  CHECK(detector.current()[0].judged == 10);
}

TEST_CASE("a straggler that catches up recovers, a new attempt starts over", "[unit][live]") {
  StragglerDetector detector(std::chrono::milliseconds(200), 10);
  const auto slow = [](int rank, std::uint64_t) -> std::int64_t {
    return rank == 7 ? 300'000'000 : 0;
  };
  const auto even = [](int, std::uint64_t) -> std::int64_t { return 0; };
  auto nodes = job(1, 10, slow);
  REQUIRE(detector.observe(nodes).size() == 1);
  nodes = job(11, 20, even);  // the window's 10 operations are all on time now
  CHECK(detector.observe(nodes).empty());
  CHECK_FALSE(rankOf(nodes, 7).straggler);
  CHECK(detector.current().empty());
  nodes = job(21, 30, slow);
  CHECK(detector.observe(nodes).size() == 1);  // late again: named again
  nodes = job(1, 1, slow, /*attempt=*/1);
  CHECK(detector.observe(nodes).empty());  // a restart: one operation judged so far
  CHECK(detector.current().empty());
}

}  // namespace straggler_test
