// dtrun/gpu_readings.h's readGpus (`dtrun gpus`): NVML's readings of every GPU, each process on
// one matched to the run's workers by their pid records. The matching is pure over a /proc
// reader, so tests give it a process table of their own. Thread-safe: no state.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "dtrun/gpu_readings.h"

#include "workers/workers.h"

namespace dtrun::agent::detail {

// A process's /proc/<pid>/stat facts; nullopt when it is gone. readProcStat on a live system.
using ProcStatReader = std::function<std::optional<ProcStat>(unsigned pid)>;

// The worker `pid` belongs to, or nullptr: the first of the process and its ancestors (at most
// 64 up; a worker may be a shell that started python) that is a recorded worker with the same
// start time (a pid reused by a later process is not the worker); else the worker whose process
// group it is in, when that group's leader is gone or is still the worker (a process whose
// parent exited is adopted by the agent or init, but keeps its group). Among several records of
// one pid (attempts of a long run) the start time decides. A process that has exited (a zombie
// not yet reaped) is nobody's.
const WorkerPid* workerOf(unsigned pid, const std::vector<WorkerPid>& workers,
                          const ProcStatReader& read);

}  // namespace dtrun::agent::detail
