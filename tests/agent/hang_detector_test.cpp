// The hang diagnosis on made-up progress snapshots (the end-to-end runs are in
// tests/integration/hang_report_test.sh), the rank ranges it prints, and the run report's JSON
// and summary made from one record.
#include "hang/hang_detector.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "hang/progress_exchange.h"
#include "report/run_report.h"

using namespace std::chrono_literals;
using dtrun::agent::detail::diagnoseHang;
using dtrun::agent::detail::RankProgress;
using dtrun::agent::detail::rankRanges;

namespace {

constexpr std::int64_t kSecond = 1000000000;

// A rank that has run `ops` operations, the last one `op`, which it is in since `since` s
// (a negative `since`: it left it) and last began or ended one at `changed` s.
RankProgress rank(int r, std::uint64_t ops, std::string op, std::string group, double since,
                  double changed) {
  RankProgress p;
  p.rank = r;
  p.pid = 1000 + r;
  p.host = "node3";
  p.snapshot.ops = ops;
  p.snapshot.op = std::move(op);
  p.snapshot.group = std::move(group);
  p.snapshot.opStartNs =
      since < 0 ? 0 : static_cast<std::int64_t>(since * static_cast<double>(kSecond));
  p.snapshot.changedNs = static_cast<std::int64_t>(changed * static_cast<double>(kSecond));
  return p;
}

}  // namespace

TEST_CASE("rank ranges fold runs of consecutive ranks", "[unit][agent]") {
  CHECK(rankRanges({}).empty());
  CHECK(rankRanges({3}) == "3");
  CHECK(rankRanges({7, 0, 1, 2, 3, 4, 6}) == "0-4,6-7");
  CHECK(rankRanges({1, 3, 5}) == "1,3,5");
}

TEST_CASE("progress within the timeout is no hang", "[unit][agent]") {
  const std::vector<RankProgress> ranks = {rank(0, 10, "all_reduce", "world", 95, 95),
                                           rank(1, 10, "all_reduce", "world", 96, 96)};
  CHECK_FALSE(diagnoseHang(ranks, 100 * kSecond, 10s));
  CHECK_FALSE(diagnoseHang({rank(0, 0, "", "", -1, 0)}, 100 * kSecond, 10s));  // never reported
  CHECK_FALSE(diagnoseHang({}, 100 * kSecond, 10s));
}

TEST_CASE("the rank behind in operation count is the suspect", "[unit][agent]") {
  std::vector<RankProgress> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.push_back(r == 5 ? rank(r, 1234, "all_reduce", "world", 7, 7)
                           : rank(r, 1235, "all_reduce", "world", 8, 8));
  }
  const auto d = diagnoseHang(ranks, 100 * kSecond, 30s);
  REQUIRE(d);
  CHECK(d->reason == "no_progress");
  CHECK(d->summary ==
        "rank 5 on node3 is in all_reduce #1234 (group world) since 93.0 s; ranks 0-4,6-7 wait "
        "in all_reduce #1235 (group world)");
  for (const auto& r : d->ranks) {
    CHECK(r.suspect == (r.rank == 5));
  }
}

TEST_CASE("with equal counts, the rank in another operation is the suspect", "[unit][agent]") {
  const std::vector<RankProgress> ranks = {
      rank(0, 6, "all_reduce", "world", 50, 50), rank(1, 6, "all_reduce", "sub0", 50, 50),
      rank(2, 6, "all_reduce", "world", 50, 50), rank(3, 6, "all_reduce", "world", 51, 51)};
  const auto d = diagnoseHang(ranks, 60 * kSecond, 3s);
  REQUIRE(d);
  CHECK(d->summary ==
        "rank 1 on node3 is in all_reduce #6 (group sub0) since 10.0 s; ranks 0,2-3 wait in "
        "all_reduce #6 (group world)");
}

TEST_CASE("a rank outside any operation while the others wait is the suspect", "[unit][agent]") {
  const std::vector<RankProgress> ranks = {rank(0, 4, "barrier", "world", 20, 20),
                                           rank(1, 4, "barrier", "world", -1, 19),
                                           rank(2, 4, "barrier", "world", 20, 20)};
  const auto d = diagnoseHang(ranks, 40 * kSecond, 10s);
  REQUIRE(d);
  CHECK(d->summary ==
        "rank 1 on node3 is outside any operation since 21.0 s (last: barrier #4 (group world)); "
        "ranks 0,2 wait in barrier #4 (group world)");
}

TEST_CASE("every rank computing past the timeout, none in an operation: no rank is blamed",
          "[unit][agent]") {
  // Issue 34: rank 0 (the first to leave its last operation) was named the root cause.
  const std::vector<RankProgress> ranks = {rank(0, 4, "all_reduce", "world", -1, 20),
                                           rank(1, 4, "all_reduce", "world", -1, 21),
                                           rank(2, 4, "all_reduce", "world", -1, 22)};
  const auto d = diagnoseHang(ranks, 40 * kSecond, 10s);
  REQUIRE(d);
  CHECK(d->reason == "no_progress");
  CHECK(d->summary ==
        "no rank is inside a collective: every rank computed longer than --hang_timeout since "
        "its last operation; ranks 0-2 are outside any operation (last: all_reduce #4 (group "
        "world))");
  for (const auto& r : d->ranks) {
    CHECK_FALSE(r.suspect);
  }
}

TEST_CASE("a reporting rank with no operation while the others wait is the suspect",
          "[unit][agent]") {
  RankProgress silent = rank(1, 0, "", "", -1, 0);
  std::vector<RankProgress> ranks = {rank(0, 1, "init_process_group", "world", 20, 20), silent,
                                     rank(2, 1, "init_process_group", "world", 21, 21)};
  // Without a writer (pid 0) rank 1 cannot be told from a slow starter: not judged.
  auto d = diagnoseHang(ranks, 40 * kSecond, 10s);
  REQUIRE(d);
  CHECK(d->summary.starts_with("rank 0 on node3 is in init_process_group #1"));
  ranks[1].snapshot.pid = 1001;  // the Python hook (or libdtrt) attached: it reports
  d = diagnoseHang(ranks, 40 * kSecond, 10s);
  REQUIRE(d);
  CHECK(d->reason == "no_progress");
  CHECK(d->summary ==
        "rank 1 on node3 has not entered any collective; ranks 0,2 wait in init_process_group "
        "#1 (group world)");
  REQUIRE(d->ranks.size() == 3);
  CHECK(d->ranks[1].rank == 1);
  CHECK(d->ranks[1].suspect);
  // While the others still make progress, a rank that has not started is no hang.
  CHECK_FALSE(diagnoseHang(ranks, 25 * kSecond, 10s));
}

TEST_CASE("a rank still starting (busy before its first operation) is no hang yet",
          "[unit][agent]") {
  RankProgress starting = rank(1, 0, "", "", -1, 0);
  starting.snapshot.pid = 1001;
  starting.snapshot.changedNs = 35 * kSecond;  // StartingRanks saw it busy 5 s ago
  const std::vector<RankProgress> ranks = {rank(0, 1, "init_process_group", "world", 20, 20),
                                           starting,
                                           rank(2, 1, "init_process_group", "world", 21, 21)};
  CHECK_FALSE(diagnoseHang(ranks, 40 * kSecond, 10s));
  // Once it has sat still for the timeout, it is the suspect as before.
  const auto d = diagnoseHang(ranks, 45 * kSecond, 10s);
  REQUIRE(d);
  CHECK(d->summary ==
        "rank 1 on node3 has not entered any collective; ranks 0,2 wait in init_process_group "
        "#1 (group world)");
}

TEST_CASE("one rank lagging while the others progress is a hang", "[unit][agent]") {
  const std::vector<RankProgress> ranks = {rank(0, 900, "send", "world", 99, 99),
                                           rank(1, 12, "recv", "world", 40, 40),
                                           rank(2, 901, "send", "world", -1, 99.5)};
  const auto d = diagnoseHang(ranks, 100 * kSecond, 30s);
  REQUIRE(d);
  CHECK(d->reason == "lagging_rank");
  CHECK(d->summary.starts_with("rank 1 on node3 is in recv #12 (group world) since 60.0 s; "));
  CHECK_FALSE(diagnoseHang(ranks, 100 * kSecond, 70s));
}

TEST_CASE("ranks waiting in the operation a late rank has just entered are not lagging",
          "[unit][agent]") {
  // torch_hang_test's slow_start under load: ranks 0 and 2 entered init_process_group 13 s
  // before rank 1, which was still starting, and the watch polled before the group formed.
  const std::vector<RankProgress> ranks = {rank(0, 1, "init_process_group", "world", 20, 20),
                                           rank(1, 1, "init_process_group", "world", 33, 33),
                                           rank(2, 1, "init_process_group", "world", 20.3, 20.3)};
  CHECK_FALSE(diagnoseHang(ranks, 33.5 * kSecond, 10s));
  // The operation never ends once all are in it: a hang, the first to enter it named.
  const auto d = diagnoseHang(ranks, 43 * kSecond, 10s);
  REQUIRE(d);
  CHECK(d->reason == "no_progress");
  CHECK(
      d->summary.starts_with("rank 0 on node3 is in init_process_group #1 (group world) since "
                             "23.0 s; "));
  // A rank still in an operation the others have left behind lags as before.
  const std::vector<RankProgress> behind = {rank(0, 2, "all_reduce", "world", 33, 33),
                                            rank(1, 1, "init_process_group", "world", 20, 20),
                                            rank(2, 2, "all_reduce", "world", 33, 33)};
  const auto lag = diagnoseHang(behind, 33.5 * kSecond, 10s);
  REQUIRE(lag);
  CHECK(lag->reason == "lagging_rank");
  CHECK(lag->summary.starts_with("rank 1 on node3 is in init_process_group #1"));
}

TEST_CASE("the report and the summary come from one record", "[unit][agent]") {
  namespace detail = dtrun::agent::detail;
  detail::JobRecord job;
  job.runId = "job9";
  job.command = {"./train"};
  job.host = "node3";
  job.agentStart = detail::Clock::now();
  detail::AttemptRecord attempt;
  attempt.started = job.agentStart + 10ms;
  attempt.firstRunning = job.agentStart + 20ms;
  attempt.ended = job.agentStart + 2s;
  attempt.cause = "worker_failed";
  attempt.message = "rank 1 failed: exit code 3";
  detail::RankRecord r;
  r.rank = 1;
  r.localRank = 1;
  r.pid = 42;
  r.exit = dtrun::agent::detail::ExitStatus{true, 9};
  attempt.ranks.push_back(r);
  job.attempts.push_back(attempt);
  job.outcome = "failed";
  job.exitCode = 3;
  job.ended = job.agentStart + 2s;

  const auto doc = nlohmann::json::parse(detail::reportJson(job));
  CHECK(doc["outcome"] == "failed");
  CHECK(doc["attempts"][0]["ranks"][0]["signal"] == "SIGKILL");
  CHECK(doc["attempts"][0]["ranks"][0]["exit_code"] == 137);
  CHECK(doc["attempts"][0]["timeline"]["first_worker_running"] == 0.02);
  CHECK(doc["attempts"][0]["phases"]["run_s"] == 1.98);
  CHECK(doc["root_cause"].is_null());
  const std::string summary = detail::formatSummary(job);
  CHECK_THAT(summary, Catch::StartsWith("dtrun: job 'job9' failed after 1 attempt(s) in 2.00 s "
                                        "(exit code 3)\n"));
  CHECK_THAT(summary, Catch::Contains("attempt 0: 0.01-2.00 s, worker_failed: rank 1 failed"));
}

TEST_CASE("progress crosses nodes as ages, not clock readings", "[unit][agent]") {
  namespace detail = dtrun::agent::detail;
  std::vector<RankProgress> ranks = {rank(2, 7, "all_reduce", "sub0", 40, 40),
                                     rank(3, 8, "barrier", "world", -1, 45),
                                     rank(4, 0, "", "", -1, 0)};
  ranks[2].snapshot.pid = 1004;  // reports, but has not entered an operation yet
  const std::string text = detail::encodeProgress(ranks, 50 * kSecond);
  // Read on a host whose monotonic clock says 1000 s: the same ages.
  const auto decoded = detail::decodeProgress(text, 1000 * kSecond);
  REQUIRE(decoded.size() == 3);
  CHECK(decoded[0].rank == 2);
  CHECK(decoded[0].snapshot.pid == 1002);  // counts as reporting: it has operations
  CHECK(decoded[2].snapshot.pid == 1004);
  CHECK(decoded[0].host == "node3");
  CHECK(decoded[0].snapshot.op == "all_reduce");
  CHECK(decoded[0].snapshot.opStartNs == 990 * kSecond);
  CHECK(decoded[1].snapshot.opStartNs == 0);
  CHECK(decoded[1].snapshot.changedNs == 995 * kSecond);
  CHECK(detail::decodeProgress("not json", 0).empty());
  CHECK(detail::decodeProgress(R"([{"rank": 1}, 7])", 0).empty());
}
