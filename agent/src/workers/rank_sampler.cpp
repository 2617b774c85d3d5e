#include "workers/rank_sampler.h"

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include <unistd.h>

namespace dtrun::agent::detail {

std::optional<std::uint64_t> cpuTicksOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos) {
    return std::nullopt;
  }
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  std::uint64_t utime = 0;
  std::uint64_t stime = 0;
  // After ')': state is field 3, utime field 14, stime field 15.
  for (int index = 3; index <= 15 && (fields >> field); ++index) {
    if (index == 14) {
      utime = std::stoull(field);
    } else if (index == 15) {
      stime = std::stoull(field);
      return utime + stime;
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> residentBytesOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/statm");
  std::uint64_t size = 0;
  std::uint64_t resident = 0;
  if (!(in >> size >> resident)) {
    return std::nullopt;
  }
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

ProcessUse RankSampler::sample(pid_t pid, std::optional<std::uint64_t> ops, std::int64_t nowNs) {
  ProcessUse use;
  use.rssBytes = residentBytesOf(pid);
  const auto ticks = cpuTicksOf(pid);
  Last& last = last_[pid];
  const double seconds = static_cast<double>(nowNs - last.atNs) / 1e9;
  if (last.atNs != 0 && seconds > 0) {
    if (ticks && last.cpuTicks && *ticks >= *last.cpuTicks) {
      const double ticksPerSecond = static_cast<double>(sysconf(_SC_CLK_TCK));
      use.cpuPercent =
          100.0 * static_cast<double>(*ticks - *last.cpuTicks) / ticksPerSecond / seconds;
    }
    if (ops && last.ops && *ops >= *last.ops) {
      use.opsPerSecond = static_cast<double>(*ops - *last.ops) / seconds;
    }
  }
  last = Last{nowNs, ticks, ops, true};
  return use;
}

void RankSampler::forgetUnseen() {
  for (auto it = last_.begin(); it != last_.end();) {
    if (!it->second.seen) {
      it = last_.erase(it);
    } else {
      it->second.seen = false;
      ++it;
    }
  }
}

}  // namespace dtrun::agent::detail
