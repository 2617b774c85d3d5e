#include "hang/starting_ranks.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace dtrun::agent::detail {

void StartingRanks::markBusy(std::vector<RankProgress>& ranks, std::int64_t nowNs) {
  std::map<pid_t, std::int64_t> seen;
  for (RankProgress& r : ranks) {
    const auto writer = static_cast<pid_t>(r.snapshot.pid);
    if (writer == 0 || r.snapshot.ops != 0) {
      continue;
    }
    const ProcessUse use = sampler_.sample(writer, std::nullopt, nowNs);
    const auto before = busyNs_.find(writer);
    std::int64_t busy = before == busyNs_.end() ? 0 : before->second;
    if (use.cpuPercent && *use.cpuPercent >= kBusyCpuPercent) {
      busy = nowNs;
    }
    seen[writer] = busy;
    r.snapshot.changedNs = std::max(r.snapshot.changedNs, busy);
  }
  // Writers that entered an operation or exited are looked at no more.
  busyNs_ = std::move(seen);
  sampler_.forgetUnseen();
}

}  // namespace dtrun::agent::detail
