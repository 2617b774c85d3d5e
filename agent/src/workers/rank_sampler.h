// A worker's use of the machine between two looks: CPU from /proc/<pid>/stat (user + system
// ticks), resident memory from /proc/<pid>/statm, and the rate of its operations from the
// progress counter; the first look at a process gives memory only. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

#include <sys/types.h>

namespace dtrun::agent::detail {

struct ProcessUse {
  std::optional<std::uint64_t> rssBytes;
  std::optional<double> cpuPercent;    // of one CPU
  std::optional<double> opsPerSecond;  // nullopt without two readings of `ops`
};

class RankSampler {
 public:
  // The use of `pid` since the last call for it; `ops` its progress counter now (nullopt: none),
  // `nowNs` CLOCK_MONOTONIC. Nothing readable (the process is gone): empty fields.
  ProcessUse sample(pid_t pid, std::optional<std::uint64_t> ops, std::int64_t nowNs);
  // Forgets processes not sampled since the previous call of forgetUnseen (exited workers).
  void forgetUnseen();

 private:
  struct Last {
    std::int64_t atNs = 0;
    std::optional<std::uint64_t> cpuTicks;
    std::optional<std::uint64_t> ops;
    bool seen = true;
  };
  std::map<pid_t, Last> last_;
};

// /proc/<pid>/stat's utime + stime, in clock ticks; nullopt when unreadable.
std::optional<std::uint64_t> cpuTicksOf(pid_t pid);
// /proc/<pid>/statm's resident pages, in bytes; nullopt when unreadable.
std::optional<std::uint64_t> residentBytesOf(pid_t pid);

}  // namespace dtrun::agent::detail
