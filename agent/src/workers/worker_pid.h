// Each worker's pid record in its rank directory (<attempt dir>/<local rank>/worker_pid; not `pid`,
// a name workers write themselves), written at every spawn, and the /proc facts that tell that
// worker from a later process given the same pid: what `dtrun gpus RUN_DIR` reads to name the rank
// of a process on a GPU. Plain functions, no state; safe from any thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace dtrun::agent::detail {

// The record's name in a rank directory. Its one line is "<pid> <start>": the start is the
// process's start time in clock ticks after boot (/proc/<pid>/stat's 22nd field), which a later
// process with the same pid does not share. `read pid start < pid` in a shell.
inline constexpr std::string_view kWorkerPidFile = "worker_pid";

// What dtrun needs of /proc/<pid>/stat.
struct ProcStat {
  unsigned pid = 0;
  char state = 'R';   // 'Z': exited, not yet reaped (a zombie holds nothing)
  unsigned ppid = 0;  // 0 for the first process of a pid namespace
  unsigned pgrp = 0;  // its process group: a worker's descendants keep the worker's
  std::uint64_t startTicks = 0;
};

// One line of /proc/<pid>/stat ("<pid> (<comm>) <state> <ppid> <pgrp> ..."; comm may hold spaces
// and parentheses); nullopt when it is not one.
std::optional<ProcStat> parseProcStat(std::string_view line);
// The live process's facts; nullopt when it is gone (or this process may not see it).
std::optional<ProcStat> readProcStat(unsigned pid);

// Writes <rankDir>/worker_pid for the worker `pid` just started (the same cost as its environment
// record: a read of /proc/<pid>/stat and one small file). A directory that cannot take it loses
// only the record: `dtrun gpus` then does not name that rank.
void writeWorkerPid(const std::filesystem::path& rankDir, pid_t pid);

// One worker a run directory records.
struct WorkerPid {
  unsigned pid = 0;
  std::uint64_t startTicks = 0;
  int rank = -1;        // RANK in its environment record
  int localRank = -1;   // LOCAL_RANK in it
  std::string attempt;  // its attempt directory's name: attempt_0, attempt_1-round3
};

// Every worker of `runDir` (<log_dir>/<run_id>) whose rank directory holds a pid record and an
// environment record naming its ranks, over every attempt, in directory order. Empty for a run
// from a dtrun before the record, or before its first spawn.
std::vector<WorkerPid> readWorkerPids(const std::filesystem::path& runDir);

}  // namespace dtrun::agent::detail
