// The pid record of an attempt (<attempt dir>/worker_pids: one line per worker the node started,
// not `pid`, a name workers write themselves), written once the attempt's workers were started,
// and the /proc facts that tell a worker from a later process given the same pid: what `dtrun gpus
// RUN_DIR` reads to name the rank of a process on a GPU. Plain functions, no state; safe from any
// thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace dtrun::agent::detail {

// The record's name in an attempt directory. A line per worker, "<local rank> <rank> <pid>
// <start>": the start is the process's start time in clock ticks after boot (/proc/<pid>/stat's
// 22nd field), which a later process with the same pid does not share. One file per attempt, not
// one per rank: a file's creation is what a launch pays most for on a busy file system.
// `awk '$1 == 1 {print $3}' attempt_0/worker_pids` is local rank 1's pid.
inline constexpr std::string_view kWorkerPidsFile = "worker_pids";

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

// The record's line for the worker `pid` just started (a read of /proc/<pid>/stat). A directory
// that cannot take the record loses only it: `dtrun gpus` then does not name those ranks.
std::string workerPidLine(int localRank, int rank, pid_t pid);

// One worker a run directory records.
struct WorkerPid {
  unsigned pid = 0;
  std::uint64_t startTicks = 0;
  int rank = -1;
  int localRank = -1;
  std::string attempt;  // its attempt directory's name: attempt_0, attempt_1-round3
};

// Every worker the pid records of `runDir` (<log_dir>/<run_id>) name, over every attempt, in
// directory order. Empty for a run from a dtrun before the record, or before its first spawn.
std::vector<WorkerPid> readWorkerPids(const std::filesystem::path& runDir);

}  // namespace dtrun::agent::detail
