// Helpers shared by the detectors (detect.cpp: SLURM, PBS and the choice among them;
// launchers.cpp: MPI launchers, Flux, LSF): environment look-ups, counts, host files, this host's
// place in a host list. Pure; thread-compatible.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dtrun/common.h"
#include "dtrun/scheduler.h"

namespace dtrun::scheduler::detail {

// Appended to errors about values the scheduler wrote: they cannot be fixed by the user, only
// bypassed.
inline constexpr std::string_view kBypass =
    "; if it was rewritten by hand, unset it, or pass --scheduler none and give --nnodes, "
    "--node_rank and --master_addr yourself";

using Var = std::pair<std::string, std::string>;  // a variable's name and value

class Env {
 public:
  explicit Env(const JobEnvironment& job) : job_(job) {}

  // The first of `names` that is set: its name and value.
  [[nodiscard]] std::optional<Var> first(std::initializer_list<std::string_view> names) const {
    for (const std::string_view name : names) {
      if (const auto it = job_.env.find(name); it != job_.env.end()) {
        return Var{std::string(name), it->second};
      }
    }
    return std::nullopt;
  }
  [[nodiscard]] bool has(std::string_view name) const { return job_.env.contains(name); }
  [[nodiscard]] const JobEnvironment& job() const { return job_; }

 private:
  const JobEnvironment& job_;  // outlives this view, a local of detect()
};

// A non-negative decimal number, blanks around it allowed.
std::optional<long long> parseCount(std::string_view text);

// "NAME='value': problem" + kBypass.
Status malformed(const Var& var, std::string_view problem);

// A count read from `var`: a non-negative number up to kMaxHosts, else malformed() saying
// "expected <what>".
Result<int> countOf(const Var& var, std::string_view what);

// Up to 8 hosts, comma-separated, then the count.
std::string listOf(const std::vector<std::string>& hosts);

// One host per line, repeated per slot (PBS_NODEFILE, LSB_DJOB_HOSTFILE): the hosts in order of
// first appearance into a.hosts, their line counts into a.slotsPerNode. `var` names the file.
Status readSlotFile(const Var& var, const std::string& text, Allocation& a);

// This host's index in a.hosts, by exact name, else by short name (which must then be
// unambiguous). `where` names the list in messages ("PBS_NODEFILE='/path'"), `how` says how to
// start dtrun on the job's hosts.
Result<int> locateHost(const Allocation& a, const std::string& hostName, const std::string& where,
                       std::string_view how);

// nodeCount, master and masterFrom from a.hosts (SLURM, PBS, LSF).
void useHostList(Allocation& a, std::string_view listVar);

// MPI launchers, Flux and LSF (launchers.cpp).
Result<Allocation> detectMpi(const Env& env);
Result<Allocation> detectFlux(const Env& env);
Result<Allocation> detectLsf(const Env& env);
// Kubeflow's pods (kubeflow.cpp): whether the environment is one, and what it says.
bool looksLikeKubeflowPod(const Env& env);
Result<Allocation> detectKubeflow(const Env& env);
// Under a batch scheduler (SLURM, PBS, LSF) started through an MPI launcher that is not Open
// MPI's (Hydra, Intel MPI): its local size, if it says several processes run on this node.
void useMpiLocalSize(const Env& env, Allocation& a);

}  // namespace dtrun::scheduler::detail
