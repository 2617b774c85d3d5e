// The network check's judging: which node the figures of a round name, and what each node's
// result, the report and the event log say. dtrun-netcheck itself runs in
// tests/integration/network_check_test.sh.
#include "health/net_check.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace {

using dtrun::Errc;
using dtrun::agent::HealthChecks;
using namespace dtrun::agent::detail;  // NOLINT(google-build-using-namespace)
using Outcome = CheckResult::Outcome;

NetMeasurement round(int n) {
  NetMeasurement m;
  m.bytes = 4 << 20;
  for (int r = 0; r < n; ++r) {
    m.nodes.push_back(NetNode{r, "node-" + std::to_string(r), "10.0.0." + std::to_string(r + 1)});
  }
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      m.pairs.push_back(NetPair{a, b, 50.0, 9.5, 9.4});
    }
  }
  return m;
}

// Every pair with `rank` gets a 30 ms round trip and 0.1 Gbit/s.
void slow(NetMeasurement& m, int rank) {
  for (auto& p : m.pairs) {
    if (p.a == rank || p.b == rank) {
      p.rttUs = 30000;
      p.gbpsAb = 0.1;
      p.gbpsBa = 0.12;
    }
  }
}

}  // namespace

TEST_CASE("network check: a healthy round names no node and passes everywhere") {
  const auto m = round(3);
  const auto v = judgeNetwork(m, 1, HealthChecks{});
  CHECK(v.named.empty());
  CHECK(v.warning.empty());
  CHECK(v.result.check == "network");
  CHECK(v.result.passed());
  CHECK(v.result.detail ==
        "3 pair(s) of 3 nodes measured; to node 0 (node-0 10.0.0.1): round trip 50 us, 9.5/9.4 "
        "Gbit/s; to node 2 (node-2 10.0.0.3): round trip 50 us, 9.5/9.4 Gbit/s");
}

TEST_CASE("network check: with 3 nodes the node in every slow pair is named, not its peers") {
  auto m = round(4);
  slow(m, 2);
  const HealthChecks floors;
  const auto named = judgeNetwork(m, 2, floors);
  CHECK(named.named == std::vector<int>{2});
  CHECK(named.warning.empty());
  CHECK(named.result.outcome == Outcome::kFailed);
  CHECK_THAT(named.result.detail,
             Catch::StartsWith("node 2 (node-2 10.0.0.3) is below the floor with every other "
                               "node: to node 0 (node-0 10.0.0.1): round trip 30000 us above "
                               "10000 us (--health_net_max_rtt_us), 0.1 Gbit/s below 1 Gbit/s "
                               "(--health_net_min_gbps); to node 1"));
  const auto peer = judgeNetwork(m, 0, floors);
  CHECK(peer.named == std::vector<int>{2});
  CHECK(peer.result.passed());
  CHECK_THAT(peer.result.detail,
             Catch::EndsWith("; node 2 (node-2 10.0.0.3) is below the floor and leaves the round"));
}

TEST_CASE("network check: with 2 nodes a slow pair names neither node") {
  auto m = round(2);
  slow(m, 1);
  for (const int self : {0, 1}) {
    const auto v = judgeNetwork(m, self, HealthChecks{});
    CHECK(v.named.empty());
    CHECK(v.result.passed());
    CHECK_THAT(v.warning, Catch::StartsWith("a slow pair (2 nodes: it cannot say which node is "
                                            "slow, so none is named): node 0 (node-0 10.0.0.1) - "
                                            "node 1 (node-1 10.0.0.2): round trip 30000 us"));
  }
}

TEST_CASE("network check: one slow link between nodes with good pairs names no node") {
  auto m = round(3);
  m.pairs[0].gbpsBa = 0.2;  // 1 -> 0 only
  const auto v = judgeNetwork(m, 0, HealthChecks{});
  CHECK(v.named.empty());
  CHECK(v.result.passed());
  CHECK_THAT(v.warning, Catch::Contains("(the link, not a node): node 0 (node-0 10.0.0.1) - node 1 "
                                        "(node-1 10.0.0.2): 0.2 Gbit/s below 1 Gbit/s"));
}

TEST_CASE("network check: a floor of 0 is not checked") {
  auto m = round(3);
  slow(m, 2);
  HealthChecks floors;
  floors.netMaxRttUs = 0;
  floors.netMinGbps = 0;
  CHECK(judgeNetwork(m, 2, floors).named.empty());
  floors.netMinGbps = 0.05;  // 0.1 Gbit/s is above it
  CHECK(judgeNetwork(m, 2, floors).named.empty());
  floors.netMaxRttUs = 20000;
  CHECK(judgeNetwork(m, 2, floors).named == std::vector<int>{2});
}

TEST_CASE("network check: the program's output, its errors, and what the report keeps") {
  const std::string good =
      "[rank 0] [warn] something libdtrt said\n"
      R"({"bytes":1024,"nodes":[{"rank":0,"host":"a","address":"10.0.0.1"},)"
      R"({"rank":1,"host":"b","address":"10.0.0.2"}],)"
      R"("pairs":[{"a":0,"b":1,"rtt_us":48.2,"gbps_ab":9.4,"gbps_ba":9.3}]})"
      "\n";
  const auto m = parseNetcheckOutput(good);
  REQUIRE(m.isOk());
  CHECK(m.value().bytes == 1024);
  REQUIRE(m.value().pairs.size() == 1);
  CHECK(m.value().pairs[0].gbpsBa == 9.3);
  CHECK(m.value().nodes[1].address == "10.0.0.2");
  const auto json = nlohmann::json::parse(
      networkJson(m.value(), judgeNetwork(m.value(), 0, HealthChecks{}), HealthChecks{}));
  CHECK(json["pairs"][0]["slow"] == false);
  CHECK(json["nodes"][1]["named"] == false);
  CHECK(json["min_gbps"] == 1.0);

  const auto late = parseNetcheckOutput(
      R"({"error":"tcp process group 'world' set-up: timed out after 5000 ms waiting for rank 2's address","timed_out":true})");
  CHECK(late.status().code() == Errc::kTimeout);
  CHECK_THAT(late.status().message(), Catch::EndsWith("waiting for rank 2's address"));
  CHECK(parseNetcheckOutput(R"({"error":"refused","timed_out":false})").status().code() ==
        Errc::kSystem);
  const auto none = parseNetcheckOutput("Segmentation fault\n");
  CHECK(none.status().code() == Errc::kProtocol);
  CHECK(none.status().message() == "dtrun-netcheck printed no result: Segmentation fault\n");
}

TEST_CASE("network check: its environment is a worker's, over the inherited one") {
  NetcheckPlace place;
  place.nodeRank = 2;
  place.nodeCount = 3;
  place.masterAddr = "10.0.0.1";
  place.masterPort = 29400;
  place.storePrefix = "/dtrun/job/netcheck/round_4";
  const auto env = netcheckEnvironment({"PATH=/bin", "RANK=7", "DTRUN_STORE_TOKEN=old"}, place);
  CHECK(env == std::vector<std::string>{
                   "PATH=/bin", "RANK=2", "WORLD_SIZE=3", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
                   "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29400",
                   "DTRUN_STORE_PREFIX=/dtrun/job/netcheck/round_4", "DTRUN_TRANSPORT=tcp"});
}

TEST_CASE("network check: after a timeout, the node every other node could not reach is named") {
  const auto out = [](const std::string& votes) {
    return R"({"error":"exchange with node rank 2: timed out","timed_out":true,"unreached":)" +
           votes + "}\n";
  };
  // Cut off (its own list names the others) or dead (no list of its own): named either way.
  CHECK(namedUnreachable(out(R"({"0":[2],"1":[2],"2":[0,1]})"), 3) == std::vector<int>{2});
  CHECK(namedUnreachable(out(R"({"0":[2],"1":[2]})"), 3) == std::vector<int>{2});
  // One reporter besides it is not enough, nor is a node that some other node reached.
  CHECK(namedUnreachable(out(R"({"0":[2]})"), 3).empty());
  CHECK(namedUnreachable(out(R"({"0":[2],"1":[],"3":[2]})"), 4).empty());
  // Two nodes: each names the other, which says nothing.
  CHECK(namedUnreachable(out(R"({"0":[1],"1":[0]})"), 2).empty());
  CHECK(namedUnreachable("killed\n", 3).empty());
}
