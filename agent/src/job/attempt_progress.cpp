#include "job/attempt_progress.h"

#include <algorithm>
#include <fstream>

namespace dtrun::agent::detail {

Progress judgeProgress(const std::vector<progress::Snapshot>& ranks,
                       std::optional<long long> iterationAtStart,
                       std::optional<long long> iterationNow) {
  if (iterationAtStart && iterationNow) {
    return *iterationNow > *iterationAtStart ? Progress::kMade : Progress::kNone;
  }
  if (!iterationAtStart && iterationNow) {
    return Progress::kMade;  // the first checkpoint of the job was written in this attempt
  }
  const bool reported = std::any_of(ranks.begin(), ranks.end(),
                                    [](const progress::Snapshot& s) { return s.pid != 0; });
  if (!reported) {
    return Progress::kUnknown;
  }
  const bool past = std::any_of(ranks.begin(), ranks.end(),
                                [](const progress::Snapshot& s) { return s.ops > kStartupOps; });
  return past ? Progress::kMade : Progress::kNone;
}

std::optional<long long> readIteration(const std::string& path) {
  std::ifstream in(path);
  long long value = 0;
  if (in && (in >> value)) {
    return value;
  }
  return std::nullopt;
}

std::chrono::milliseconds restartDelay(int restartsUsed, std::chrono::milliseconds base,
                                       std::chrono::milliseconds max) {
  if (base.count() <= 0) {
    return std::chrono::milliseconds(0);
  }
  const std::chrono::milliseconds cap = max.count() > 0 ? max : base;
  std::chrono::milliseconds delay = base;
  for (int i = 0; i < restartsUsed && delay < cap; ++i) {
    delay *= 2;
  }
  return std::min(delay, cap);
}

}  // namespace dtrun::agent::detail
