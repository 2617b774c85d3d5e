// Ranks that entered no operation yet are still starting while they keep a CPU busy (importing
// torch, loading data: seconds apart between ranks on a loaded node), not hung. Their use of the
// CPU counts as progress, so that the ranks already waiting in their first operation do not
// make a hang of the wait (diagnoseHang); a rank that sits still before its first operation
// (asleep, blocked) is judged as before. Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include <sys/types.h>

#include "hang/hang_detector.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

class StartingRanks {
 public:
  // At least this much of one CPU between two looks is busy: an import on a loaded node gets
  // tens of percent, a sleeping process none.
  static constexpr double kBusyCpuPercent = 5.0;

  // Looks at each rank of `ranks` that has a writer (snapshot.pid) and no operation yet, at
  // `nowNs` (CLOCK_MONOTONIC): its snapshot.changedNs becomes the last look that found it busy
  // since the look before, when that is later. The first look at a process only starts its count.
  void markBusy(std::vector<RankProgress>& ranks, std::int64_t nowNs);

 private:
  RankSampler sampler_;
  std::map<pid_t, std::int64_t> busyNs_;  // per writer: the last look that found it busy
};

}  // namespace dtrun::agent::detail
