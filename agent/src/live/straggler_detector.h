// Stragglers, named from the entry times of collectives with no change to the training script.
// Every rank records when it began each operation (the progress file's ring, written by the
// Python hook and libdtrt); operation n of one rank meets operation n of every other, so for
// each operation all ranks entered, a rank's lateness is its entry time minus the lower median
// of all ranks' entry times. A rank late by more than the threshold in enough of the last
// `window` judged operations (a tenth of them, at least two) is a straggler until it is late in
// none of them. Entry times, not exits: every rank leaves a collective together, so only the
// entry shows who the others waited for. Not thread-safe (the agent's loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "live/node_status.h"

namespace dtrun::agent::detail {

struct Straggler {
  int rank = 0;
  int nodeRank = 0;
  std::string host;
  double lateSeconds = 0;  // the median of its lateness in the operations it was late in
  int lateCount = 0;       // operations of the window it was late in
  int judged = 0;          // operations in the window
};

class StragglerDetector {
 public:
  StragglerDetector(std::chrono::milliseconds threshold, int window);

  // Takes in every node's ranks of one attempt (`nodes`, the whole job), judges each operation
  // all of its ranks have entered since the last call, and marks each rank's `straggler` and
  // `lateSeconds` (0 for a rank late in fewer operations than would name it). Returns the ranks
  // named in this call (each once until it recovers). A new round or attempt starts the judgement
  // over.
  std::vector<Straggler> observe(std::vector<NodeStatus>& nodes);
  // The ranks named now, slowest first.
  [[nodiscard]] std::vector<Straggler> current() const;

 private:
  void startOver(std::int64_t round, int attempt);
  void judge(const std::map<int, std::int64_t>& entries);
  [[nodiscard]] Straggler verdictOf(int rank) const;

  const double thresholdSeconds_;
  const std::size_t window_;
  const int needed_;  // late operations in the window that name a rank
  std::pair<std::int64_t, int> attempt_{-1, -1};
  std::map<int, std::map<std::uint64_t, std::int64_t>> unjudged_;  // rank -> op -> entry ns
  std::uint64_t judgedUpTo_ = 0;
  std::deque<std::map<int, double>> judgements_;  // the window: each op's rank -> lateness (s)
  std::map<int, Straggler> named_;
  std::map<int, std::pair<int, std::string>> placeOf_;  // rank -> node rank, host
};

}  // namespace dtrun::agent::detail
