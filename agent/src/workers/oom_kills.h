// Whether the kernel's OOM killer ended a worker. A SIGKILL looks the same whoever sent it; the
// memory cgroup counts its own OOM kills (cgroup v2: memory.events "oom_kill"; v1:
// memory.oom_control "oom_kill"). Workers stay in the agent's cgroup, so a count that grew
// while an attempt ran, read when a worker died of SIGKILL, names the kernel as the sender.
#pragma once

#include <optional>
#include <string>

namespace dtrun::agent::detail {

class OomKillCount {
 public:
  // The memory cgroup of this process, from /proc/self/cgroup (v2 first, then v1's memory
  // controller); one that cannot be read counts nothing (kills() is nullopt).
  static OomKillCount ofThisProcess();
  // The cgroup at `dir`, v2 or v1 by the files it holds (tests).
  static OomKillCount ofCgroup(const std::string& dir);

  [[nodiscard]] std::optional<long long> kills() const;
  // "killed by the kernel: out of memory (cgroup limit 64 MiB)", without the limit when there is
  // none.
  [[nodiscard]] std::string describeKill() const;

 private:
  std::string eventsFile_;  // the file with the "oom_kill N" line ("" = none)
  std::string limitFile_;   // memory.max (v2) or memory.limit_in_bytes (v1)
};

}  // namespace dtrun::agent::detail
