// StartingRanks on real processes: a busy one before its first operation counts as changed, an
// asleep one does not, and a rank already in its operations is left alone.
#include "hang/starting_ranks.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "progress_file.h"
#include "support/process.h"

using dtrun::agent::detail::RankProgress;
using dtrun::agent::detail::StartingRanks;
using dtrun::testing::ChildGuard;

namespace {

RankProgress beforeFirstOperation(int rank, pid_t writer) {
  RankProgress r;
  r.rank = rank;
  r.pid = writer;
  r.snapshot.pid = writer;
  return r;
}

}  // namespace

TEST_CASE("a rank busy before its first operation is still starting, an asleep one is not",
          "[unit][agent]") {
  ChildGuard busy([] {
    std::atomic<unsigned long> spins{0};
    for (;;) {
      spins.fetch_add(1, std::memory_order_relaxed);
    }
    return 0;
  });
  ChildGuard asleep([] {
    ::sleep(60);
    return 0;
  });
  RankProgress inOperation = beforeFirstOperation(2, busy.pid());
  inOperation.snapshot.ops = 3;
  inOperation.snapshot.changedNs = 7;

  StartingRanks starting;
  std::vector<RankProgress> ranks = {beforeFirstOperation(0, busy.pid()),
                                     beforeFirstOperation(1, asleep.pid()), inOperation};
  starting.markBusy(ranks, dtrun::progress::monotonicNs());  // the first look only counts
  CHECK(ranks[0].snapshot.changedNs == 0);
  CHECK(ranks[1].snapshot.changedNs == 0);

  // Half a second: the spinning child gets far more than 5% of a CPU on any machine that runs
  // this suite (under the flake table's load too); the sleeping one gets none.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::int64_t second = dtrun::progress::monotonicNs();
  starting.markBusy(ranks, second);
  CHECK(ranks[0].snapshot.changedNs == second);
  CHECK(ranks[1].snapshot.changedNs == 0);
  CHECK(ranks[2].snapshot.changedNs == 7);

  // A later look keeps the busy time of a fresh snapshot (read again from the progress file).
  std::vector<RankProgress> again = {beforeFirstOperation(0, busy.pid())};
  ::kill(busy.pid(), SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  starting.markBusy(again, dtrun::progress::monotonicNs());
  CHECK(again[0].snapshot.changedNs == second);
  ::kill(busy.pid(), SIGCONT);
}
