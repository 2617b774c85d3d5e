// The per-node agent: hosts the store, starts the local worker group with torchrun's environment,
// watches it through one event loop, restarts it on failure and reports the root cause.
// run() owns the calling thread until the job ends; call it from main() after blocking signals.
#pragma once

#include <string>
#include <vector>

#include "dtrun/agent_config.h"

namespace dtrun::agent {

// Runs the job on this node and returns dtrun's exit code: 0 when every worker succeeded; the
// root cause's exit code (128 + signal for a signal) once restarts ran out; 128 + signal when a
// handled signal stopped the job.
int run(const AgentConfig& config);

// The signal that makes the agent dump every running worker's stacks into its run directory
// (`kill -s RTMIN+3 <agent pid>`; the job runs on): SIGRTMIN+3, a real-time one, as SIGUSR1/2
// are forwarded to the workers and SIGRTMIN+2 is the workers' own stack signal. Block it with
// the handled signals before any thread exists: its default action ends the process.
int stackDumpSignal();

// The environment run() gives the worker at `localRank` of node `nodeRank` in attempt 0 of a job
// of `nodeCount` nodes that each run config.nprocPerNode workers, with `logDir` as its log
// directory: what --dry-run shows. `inherited` holds "NAME=value" entries.
std::vector<std::string> plannedWorkerEnvironment(const AgentConfig& config,
                                                  const std::vector<std::string>& inherited,
                                                  int nodeRank, int nodeCount, int localRank,
                                                  const std::string& logDir);

}  // namespace dtrun::agent
