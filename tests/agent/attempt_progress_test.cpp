// Whether an attempt made progress, and the backoff between attempts.
#include "job/attempt_progress.h"

#include <fstream>

#include <catch2/catch.hpp>

#include "support/scoped.h"

using dtrun::agent::detail::judgeProgress;
using dtrun::agent::detail::Progress;
using dtrun::agent::detail::readIteration;
using dtrun::agent::detail::restartDelay;
using dtrun::progress::Snapshot;
using std::chrono::milliseconds;

namespace {

Snapshot rank(int pid, std::uint64_t ops) {
  Snapshot s;
  s.pid = pid;
  s.ops = ops;
  return s;
}

}  // namespace

TEST_CASE("progress: a rank past its start, unknown when nothing reports", "[unit][agent]") {
  CHECK(judgeProgress({}, {}, {}) == Progress::kUnknown);
  CHECK(judgeProgress({rank(0, 0), rank(0, 0)}, {}, {}) == Progress::kUnknown);
  CHECK(judgeProgress({rank(11, 1), rank(12, 2)}, {}, {}) == Progress::kNone);
  CHECK(judgeProgress({rank(11, 1), rank(12, 3)}, {}, {}) == Progress::kMade);
}

TEST_CASE("progress: the checkpoint-iteration file decides when it can be read", "[unit][agent]") {
  CHECK(judgeProgress({rank(11, 100)}, 40, 40) == Progress::kNone);
  CHECK(judgeProgress({rank(11, 0)}, 40, 41) == Progress::kMade);
  CHECK(judgeProgress({}, std::nullopt, 1) == Progress::kMade);  // the job's first checkpoint
  CHECK(judgeProgress({rank(11, 1)}, std::nullopt, std::nullopt) == Progress::kNone);
  dtrun::testing::TempDir dir;
  const std::string path = (dir.path() / "iteration").string();
  CHECK_FALSE(readIteration(path));
  std::ofstream(path) << "1200\n";
  CHECK(readIteration(path) == 1200);
  std::ofstream(path) << "step?";
  CHECK_FALSE(readIteration(path));
}

TEST_CASE("restart backoff doubles up to its cap", "[unit][agent]") {
  CHECK(restartDelay(0, milliseconds(0), milliseconds(60000)) == milliseconds(0));
  CHECK(restartDelay(0, milliseconds(500), milliseconds(60000)) == milliseconds(500));
  CHECK(restartDelay(3, milliseconds(500), milliseconds(60000)) == milliseconds(4000));
  CHECK(restartDelay(20, milliseconds(500), milliseconds(60000)) == milliseconds(60000));
  CHECK(restartDelay(1000000, milliseconds(500), milliseconds(3000)) == milliseconds(3000));
  CHECK(restartDelay(4, milliseconds(500), milliseconds(0)) == milliseconds(500));
}
