// The workers room's interface: a worker process, one attempt's worker group, the workers'
// environment and pid records, the guardian that outlives the agent, the cgroup's OOM kills, a
// worker's use of the machine (CPU, memory) between two looks.
// Other rooms and the wiring include this header only; the files it lists are the room's own.
#pragma once

#include "workers/child_process.h"    // IWYU pragma: export
#include "workers/oom_kills.h"        // IWYU pragma: export
#include "workers/rank_sampler.h"     // IWYU pragma: export
#include "workers/worker_env.h"       // IWYU pragma: export
#include "workers/worker_group.h"     // IWYU pragma: export
#include "workers/worker_guardian.h"  // IWYU pragma: export
#include "workers/worker_pid.h"       // IWYU pragma: export
