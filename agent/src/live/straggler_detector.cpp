#include "live/straggler_detector.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include "progress_file.h"

namespace dtrun::agent::detail {
namespace {

// Entry times kept per rank while the other ranks' reports of the same operations are awaited
// (another node's status arrives up to a couple of seconds later than this node's).
constexpr std::size_t kUnjudgedLimit = 8 * progress::kEntryRingSize;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 != 0 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

}  // namespace

StragglerDetector::StragglerDetector(std::chrono::milliseconds threshold, int window)
    : thresholdSeconds_(static_cast<double>(threshold.count()) / 1000.0),
      window_(static_cast<std::size_t>(std::max(window, 2))),
      needed_(std::max(2, (window + 9) / 10)) {}

void StragglerDetector::startOver(std::int64_t round, int attempt) {
  attempt_ = {round, attempt};
  unjudged_.clear();
  judgedUpTo_ = 0;
  judgements_.clear();
  named_.clear();
  placeOf_.clear();
}

std::vector<Straggler> StragglerDetector::observe(std::vector<NodeStatus>& nodes) {
  if (nodes.empty()) {
    return {};
  }
  const std::pair<std::int64_t, int> attempt{nodes.front().round, nodes.front().attempt};
  if (attempt != attempt_) {
    startOver(attempt.first, attempt.second);
  }
  // Only a whole job of one attempt is judged: a node still on another attempt, or one whose
  // status has not arrived, would make other ranks' operations look unmatched.
  const bool whole = static_cast<int>(nodes.size()) == nodes.front().nodeCount &&
                     std::all_of(nodes.begin(), nodes.end(), [&](const NodeStatus& n) {
                       return std::pair<std::int64_t, int>{n.round, n.attempt} == attempt;
                     });
  std::vector<Straggler> newlyNamed;
  if (whole) {
    std::uint64_t upTo = std::numeric_limits<std::uint64_t>::max();
    std::size_t rankCount = 0;
    for (const NodeStatus& n : nodes) {
      for (const RankStatus& r : n.ranks) {
        ++rankCount;
        placeOf_[r.rank] = {n.nodeRank, n.host};
        auto& mine = unjudged_[r.rank];
        for (const auto& [op, at] : r.entryTimes) {
          if (op > judgedUpTo_) {
            mine[op] = at;
          }
        }
        while (mine.size() > kUnjudgedLimit) {
          mine.erase(mine.begin());
        }
        upTo = std::min(upTo, mine.empty() ? judgedUpTo_ : mine.rbegin()->first);
      }
    }
    if (rankCount >= 2 && unjudged_.size() == rankCount && upTo > judgedUpTo_) {
      for (auto op =
               std::max(judgedUpTo_ + 1, upTo - std::min<std::uint64_t>(upTo, kUnjudgedLimit));
           op <= upTo; ++op) {
        std::map<int, std::int64_t> entries;
        for (const auto& [rank, ops] : unjudged_) {
          if (const auto it = ops.find(op); it != ops.end()) {
            entries.emplace(rank, it->second);
          }
        }
        if (entries.size() == rankCount) {  // an operation some rank's ring no longer held: skipped
          judge(entries);
        }
      }
      judgedUpTo_ = upTo;
      for (auto& [rank, ops] : unjudged_) {
        ops.erase(ops.begin(), ops.upper_bound(upTo));
      }
    }
    for (const auto& [rank, place] : placeOf_) {
      Straggler verdict = verdictOf(rank);
      if (verdict.lateCount >= needed_ && !named_.contains(rank)) {
        newlyNamed.push_back(verdict);
        named_[rank] = verdict;
      } else if (verdict.lateCount == 0) {
        named_.erase(rank);  // recovered: named again if it falls behind again
      } else if (named_.contains(rank)) {
        named_[rank] = verdict;
      }
    }
  }
  for (NodeStatus& n : nodes) {
    for (RankStatus& r : n.ranks) {
      r.straggler = named_.contains(r.rank);
      if (!judgements_.empty()) {
        // A rank late once (a slow start, a pause) shows 0, not that one lateness: the figure
        // says how late a rank keeps the others waiting, only where it does.
        const Straggler verdict = verdictOf(r.rank);
        r.lateSeconds = r.straggler || verdict.lateCount >= needed_ ? verdict.lateSeconds : 0.0;
      }
    }
  }
  return newlyNamed;
}

void StragglerDetector::judge(const std::map<int, std::int64_t>& entries) {
  std::vector<std::int64_t> times;
  times.reserve(entries.size());
  for (const auto& [rank, at] : entries) {
    times.push_back(at);
  }
  // The lower median: with two ranks, the earlier one, so the later one's lateness is the gap.
  auto middle = times.begin() + static_cast<std::ptrdiff_t>((times.size() - 1) / 2);
  std::nth_element(times.begin(), middle, times.end());
  const std::int64_t reference = *middle;
  std::map<int, double> lateness;
  for (const auto& [rank, at] : entries) {
    lateness.emplace(rank, static_cast<double>(at - reference) / 1e9);
  }
  judgements_.push_back(std::move(lateness));
  if (judgements_.size() > window_) {
    judgements_.pop_front();
  }
}

Straggler StragglerDetector::verdictOf(int rank) const {
  Straggler s;
  s.rank = rank;
  if (const auto it = placeOf_.find(rank); it != placeOf_.end()) {
    s.nodeRank = it->second.first;
    s.host = it->second.second;
  }
  std::vector<double> late;
  for (const auto& lateness : judgements_) {
    if (const auto it = lateness.find(rank);
        it != lateness.end() && it->second > thresholdSeconds_) {
      late.push_back(it->second);
    }
  }
  s.judged = static_cast<int>(judgements_.size());
  s.lateCount = static_cast<int>(late.size());
  s.lateSeconds = late.empty() ? 0.0 : median(std::move(late));
  return s;
}

std::vector<Straggler> StragglerDetector::current() const {
  std::vector<Straggler> all;
  std::transform(named_.begin(), named_.end(), std::back_inserter(all),
                 [](const auto& entry) { return entry.second; });
  std::sort(all.begin(), all.end(),
            [](const Straggler& a, const Straggler& b) { return a.lateSeconds > b.lateSeconds; });
  return all;
}

}  // namespace dtrun::agent::detail
