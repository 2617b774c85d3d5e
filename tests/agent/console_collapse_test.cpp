// ConsoleCollapse: identical lines of several ranks grouped within the window, differing lines
// alone behind their rank, each rank's order kept, the wait bounded; and the rank-range text.
// The end-to-end runs are tests/integration/console_collapse_test.sh.
#include "console/console_collapse.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

using dtrun::agent::detail::CollapsedLine;
using dtrun::agent::detail::collapsedPrefix;
using dtrun::agent::detail::ConsoleCollapse;
using dtrun::agent::detail::ConsoleStream;
using dtrun::agent::detail::rankRangeText;
using namespace std::chrono_literals;

namespace {

const ConsoleCollapse::Clock::time_point t0{};

void addLine(ConsoleCollapse& c, int rank, const std::string& text,
             ConsoleCollapse::Clock::duration at, ConsoleStream s = ConsoleStream::kOut) {
  const std::vector<int> ranks{rank};
  c.add(s, ranks, text, t0 + at);
}

std::vector<std::string> render(const std::vector<CollapsedLine>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) {
    out.push_back(collapsedPrefix(l.ranks) + l.text);
  }
  return out;
}

}  // namespace

TEST_CASE("rank ranges: runs become a-b, the rest single ranks", "[unit][agent]") {
  CHECK(rankRangeText(std::vector<int>{}).empty());
  CHECK(rankRangeText(std::vector<int>{3}) == "3");
  CHECK(rankRangeText(std::vector<int>{0, 1}) == "0-1");
  CHECK(rankRangeText(std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}) == "0-7");
  CHECK(rankRangeText(std::vector<int>{0, 1, 2, 3, 5, 9, 10}) == "0-3,5,9-10");
  CHECK(rankRangeText(std::vector<int>{1, 3, 5}) == "1,3,5");
  CHECK(collapsedPrefix(std::vector<int>{4}) == "[rank 4]: ");
  CHECK(collapsedPrefix(std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}) == "[ranks 0-7]: ");
}

TEST_CASE("a line every rank printed goes out once, at once", "[unit][agent]") {
  ConsoleCollapse c(200ms, 8);
  for (int r = 0; r < 8; ++r) {
    addLine(c, r, "epoch 3 loss 0.41\n", std::chrono::milliseconds(r));
    if (r < 7) {
      CHECK(c.take(t0 + 10ms).empty());  // not every rank yet, window not over
    }
  }
  CHECK(render(c.take(t0 + 10ms)) == std::vector<std::string>{"[ranks 0-7]: epoch 3 loss 0.41\n"});
  CHECK(c.pending() == 0);
}

TEST_CASE("differing lines go out behind their own rank once the window ends", "[unit][agent]") {
  ConsoleCollapse c(200ms, 4);
  addLine(c, 0, "same\n", 0ms);
  addLine(c, 1, "same\n", 1ms);
  addLine(c, 2, "rank 2 sees 7\n", 2ms);
  addLine(c, 3, "same\n", 3ms);
  CHECK(c.take(t0 + 199ms).empty());
  REQUIRE(c.nextDeadline() == t0 + 200ms);
  CHECK(render(c.take(t0 + 200ms)) == std::vector<std::string>{"[ranks 0-1,3]: same\n"});
  CHECK(render(c.take(t0 + 202ms)) == std::vector<std::string>{"[rank 2]: rank 2 sees 7\n"});
}

TEST_CASE("stdout and stderr lines never group together", "[unit][agent]") {
  ConsoleCollapse c(200ms, 2);
  addLine(c, 0, "warning\n", 0ms, ConsoleStream::kErr);
  addLine(c, 1, "warning\n", 0ms, ConsoleStream::kOut);
  const auto out = c.take(t0 + 200ms);
  REQUIRE(out.size() == 2);
  CHECK(out[0].stream == ConsoleStream::kErr);
  CHECK(out[1].stream == ConsoleStream::kOut);
}

TEST_CASE("each rank's lines keep their order", "[unit][agent]") {
  ConsoleCollapse c(200ms, 2);
  addLine(c, 0, "A\n", 0ms);
  addLine(c, 1, "B\n", 1ms);
  addLine(c, 1, "A\n", 2ms);  // joins rank 0's A: its B (no rank 0 line) moves ahead of that
  addLine(c, 0, "B\n", 3ms);  // must not join rank 1's B: that would put it before A
  CHECK(render(c.takeAll()) ==
        std::vector<std::string>{"[rank 1]: B\n", "[ranks 0-1]: A\n", "[rank 0]: B\n"});
}

TEST_CASE("a rank's pipe read late does not split the next common line", "[unit][agent]") {
  // docs/diagnosis.md's example under load: rank 3 prints a line of its own each step, and the
  // console reads the other ranks' next step before rank 3's line.
  ConsoleCollapse c(10s, 8);
  for (const int r : {0, 1, 2, 4, 5, 6, 7}) {
    addLine(c, r, "step 0\n", 0ms);
    addLine(c, r, "step 1\n", 10ms);
  }
  addLine(c, 3, "step 0\n", 20ms);
  addLine(c, 3, "rank 3 sees 7\n", 20ms);
  addLine(c, 3, "step 1\n", 20ms);
  CHECK(render(c.takeAll()) == std::vector<std::string>{"[ranks 0-7]: step 0\n",
                                                        "[rank 3]: rank 3 sees 7\n",
                                                        "[ranks 0-7]: step 1\n"});
}

TEST_CASE("lines of different ranks keep the order they were read in", "[unit][agent]") {
  ConsoleCollapse c(200ms, 4);
  for (int r = 0; r < 4; ++r) {
    addLine(c, r, "rank " + std::to_string(r) + " loaded its shard\n",
            std::chrono::milliseconds(r));
  }
  CHECK(render(c.take(t0 + 203ms)) ==
        std::vector<std::string>{
            "[rank 0]: rank 0 loaded its shard\n", "[rank 1]: rank 1 loaded its shard\n",
            "[rank 2]: rank 2 loaded its shard\n", "[rank 3]: rank 3 loaded its shard\n"});
}

TEST_CASE("a line moved ahead leaves by the deadline of the group it passed", "[unit][agent]") {
  ConsoleCollapse c(200ms, 8);
  addLine(c, 0, "T\n", 0ms);
  addLine(c, 1, "own\n", 150ms);
  addLine(c, 1, "T\n", 160ms);  // moves "own" ahead of T's group
  CHECK(c.nextDeadline() == t0 + 200ms);
  CHECK(render(c.take(t0 + 200ms)) ==
        std::vector<std::string>{"[rank 1]: own\n", "[ranks 0-1]: T\n"});
}

TEST_CASE("many lines moved into one place keep their order", "[unit][agent]") {
  // Each move takes the midpoint of its neighbours' positions: past about 20 the queue is
  // renumbered.
  constexpr int kRanks = 40;
  ConsoleCollapse c(200ms, kRanks);
  addLine(c, 0, "T\n", 0ms);
  std::vector<std::string> expected;
  for (int r = 1; r < kRanks; ++r) {
    addLine(c, r, "own " + std::to_string(r) + "\n", 1ms);
    addLine(c, r, "T\n", 1ms);
    expected.push_back("[rank " + std::to_string(r) + "]: own " + std::to_string(r) + "\n");
  }
  expected.emplace_back("[ranks 0-39]: T\n");
  CHECK(render(c.takeAll()) == expected);
}

TEST_CASE("a rank printing the same line twice gets it twice", "[unit][agent]") {
  ConsoleCollapse c(200ms, 2);
  addLine(c, 0, "tick\n", 0ms);
  addLine(c, 0, "tick\n", 1ms);
  addLine(c, 1, "tick\n", 2ms);
  addLine(c, 1, "tick\n", 3ms);
  CHECK(render(c.take(t0 + 3ms)) ==
        std::vector<std::string>{"[ranks 0-1]: tick\n", "[ranks 0-1]: tick\n"});
}

TEST_CASE("a line arriving after its group left opens a new one", "[unit][agent]") {
  ConsoleCollapse c(200ms, 3);
  addLine(c, 0, "late\n", 0ms);
  addLine(c, 1, "late\n", 10ms);
  CHECK(render(c.take(t0 + 200ms)) == std::vector<std::string>{"[ranks 0-1]: late\n"});
  addLine(c, 2, "late\n", 300ms);
  CHECK(c.take(t0 + 301ms).empty());
  CHECK(render(c.take(t0 + 500ms)) == std::vector<std::string>{"[rank 2]: late\n"});
}

TEST_CASE("no line waits longer than the window, even behind other groups", "[unit][agent]") {
  ConsoleCollapse c(200ms, 8);
  for (int i = 0; i < 50; ++i) {
    addLine(c, i % 8, "line " + std::to_string(i) + "\n", std::chrono::milliseconds(i * 10));
  }
  // At every instant, everything printed a full window ago is out.
  std::size_t taken = 0;
  for (auto now = t0; now <= t0 + 1000ms; now += 1ms) {
    taken += c.take(now).size();
    if (now >= t0 + 200ms) {
      const auto printedBefore = (now - t0 - 200ms) / 10ms + 1;
      CHECK(static_cast<long>(taken) >= std::min<long>(printedBefore, 50));
    }
  }
  CHECK(taken == 50);
}

TEST_CASE("a group collapsed elsewhere joins with its ranks and its age", "[unit][agent]") {
  ConsoleCollapse c(200ms, 16);
  addLine(c, 0, "step 10\n", 100ms);
  const std::vector<int> remote{8, 9, 10, 11, 12, 13, 14, 15};
  c.add(ConsoleStream::kOut, remote, "step 10\n", t0 + 50ms);  // printed before ours
  CHECK(c.nextDeadline() == t0 + 250ms);
  for (int r = 1; r < 8; ++r) {
    addLine(c, r, "step 10\n", 101ms);
  }
  CHECK(render(c.take(t0 + 101ms)) == std::vector<std::string>{"[ranks 0-15]: step 10\n"});
}

TEST_CASE("too many pending groups push the oldest out early", "[unit][agent]") {
  ConsoleCollapse c(200ms, 2);
  for (std::size_t i = 0; i < ConsoleCollapse::kMaxPending + 10; ++i) {
    addLine(c, 0, std::to_string(i) + "\n", 0ms);
  }
  CHECK(c.take(t0).size() == 10);
  CHECK(c.pending() == ConsoleCollapse::kMaxPending);
}
