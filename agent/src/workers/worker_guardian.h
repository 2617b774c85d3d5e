// Kills the process groups of this agent's workers when the agent dies without doing it itself
// (SIGKILL, a crash). PR_SET_PDEATHSIG takes the workers with the agent, but not their own
// children, which would run on as orphans. A small helper process, forked before the agent starts
// any thread, reads the groups the agent starts and releases from a pipe; when the agent's end
// of the pipe closes, it SIGKILLs the groups still listed and exits. What left those groups
// (setsid, a daemon) is found by the mark every worker's environment carries
// (DTRUN_GUARDIAN_MARK, inherited by its descendants): after the agent's death the guardian
// SIGKILLs every process whose environment holds it.
#pragma once

#include <string>

#include <sys/types.h>

namespace dtrun::agent::detail {

// Once per process, while it has a single thread. Failing to start one is logged, not fatal: the
// job runs as before, without the guard.
void startWorkerGuardian();

// This agent's mark for its workers' environment ("" without a guardian).
const std::string& workerGuardianMark();

// Tells the guardian the agent ends normally (no mark to hunt: the attempt's end killed what the
// workers left), closes the agent's end of the pipe and reaps the guardian (it exits at once,
// having nothing left to kill), waiting at most a second: dtrun never leaves its helper behind as a
// zombie.
void stopWorkerGuardian();

// A worker's process group started / the agent is done with it (killed and reaped). No-ops
// without a guardian.
void guardGroup(pid_t group);
void releaseGroup(pid_t group);

}  // namespace dtrun::agent::detail
