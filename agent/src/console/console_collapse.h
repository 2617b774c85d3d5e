// Groups identical console lines of several ranks: a line that ranks print within a short window
// goes out once, behind the ranks that printed it ("[ranks 0-7]: epoch 3 loss 0.41"); a line
// only one rank printed goes out behind that rank ("[rank 3]: ..."). Pure: the caller owns the
// clock, the timer and the writes (collapsed_console.h on one node, console_relay.h across
// nodes).
//
// Order: each rank's lines come out in the order it printed them; lines of different ranks
// keep the order in which they were read, except where grouping needs otherwise. A line joins the
// oldest pending group with the same text that comes after every group its ranks have pending
// (so a rank printing "tick" twice joins the second "tick" group of the others). Without one,
// when the text's last group lies before some of its ranks' pending lines, those lines' groups
// move ahead of it and the line joins it, provided no other rank's order forbids the move (a
// group moves past no group holding one of its ranks). That keeps a step's common line whole
// when the console reads one rank's pipe late: the slow rank's line of its own, read after the
// others' next common line, moves ahead of that line's group. Otherwise the line opens a group
// of its own at the back. Groups leave from the front only, so a group never overtakes an
// earlier line of any of its ranks.
//
// Bound: a group leaves once every expected rank is in it, or once its oldest line is `window`
// old (a group moved ahead of another, by the other's deadline at the latest), so no line waits
// longer than the window (plus the time until the caller's timer fires).
// At most kMaxPending groups wait; more push the oldest out early. Not thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dtrun::agent::detail {

enum class ConsoleStream : std::uint8_t { kOut = 0, kErr = 1 };

// "0-7", "0-3,5,9-10": sorted, distinct ranks as ranges.
std::string rankRangeText(std::span<const int> sortedRanks);
// "[rank 3]: " or "[ranks 0-7]: ", the collapsed console's line prefix.
std::string collapsedPrefix(std::span<const int> sortedRanks);

struct CollapsedLine {
  ConsoleStream stream = ConsoleStream::kOut;
  std::vector<int> ranks;                        // sorted, distinct
  std::string text;                              // the line with its end ('\n' or '\r')
  std::chrono::steady_clock::time_point oldest;  // when the first of its ranks printed it
};

class ConsoleCollapse {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kMaxPending = 4096;

  // `expectedRanks`: how many ranks print to this console (0 = unknown: groups leave only when
  // their window ends).
  ConsoleCollapse(std::chrono::milliseconds window, std::size_t expectedRanks)
      : window_(window), expected_(expectedRanks) {}

  void setExpectedRanks(std::size_t n) { expected_ = n; }
  void setWindow(std::chrono::milliseconds window) { window_ = window; }
  [[nodiscard]] std::chrono::milliseconds window() const { return window_; }

  // A whole line printed by `ranks` (one rank, or a group another node collapsed already) at
  // `printed`.
  void add(ConsoleStream stream, std::span<const int> ranks, std::string_view text,
           Clock::time_point printed);
  // The groups ready at `now`, in order.
  std::vector<CollapsedLine> take(Clock::time_point now);
  // Every pending group, in order (the end of an attempt).
  std::vector<CollapsedLine> takeAll();
  // When the front group's window ends (nullopt: nothing pending).
  [[nodiscard]] std::optional<Clock::time_point> nextDeadline() const;
  [[nodiscard]] std::size_t pending() const { return groups_.size(); }

 private:
  struct Group {
    CollapsedLine line;
    Clock::time_point due;  // its window starts here: `oldest`, or earlier (moved ahead)
    std::uint64_t pos = 0;  // its place in the queue: increasing from the front, with gaps
  };
  using GroupIt = std::list<Group>::iterator;
  GroupIt open(ConsoleStream stream, std::string_view text, Clock::time_point printed);
  bool pullAhead(GroupIt group, GroupIt last, std::span<const int> ranks);
  void place(GroupIt g);
  void renumber();
  void popFront(std::vector<CollapsedLine>& out);
  [[nodiscard]] bool ready(const Group& g, Clock::time_point now) const;
  static std::string key(ConsoleStream stream, std::string_view text);

  std::chrono::milliseconds window_;
  std::size_t expected_;
  std::list<Group> groups_;  // a list: groups move ahead of others and are referred to by iterator
  // (stream, text) -> its pending groups, front to back.
  std::unordered_map<std::string, std::deque<GroupIt>> byText_;
  std::unordered_map<int, GroupIt> lastOf_;  // rank -> its last pending group
};

}  // namespace dtrun::agent::detail
