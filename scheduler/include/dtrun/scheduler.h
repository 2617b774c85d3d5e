// Scheduler and launcher detection: what SLURM, PBS, LSF, Flux, an MPI launcher (Open MPI's
// mpirun/prterun, MPICH's Hydra) or a Kubeflow operator's pod says about the job dtrun runs in (the
// node count and, where the environment says, the hosts in order, this node's index, the first
// node's address, the job id), read natively from the environment and host files (no scontrol, no
// flux command). Pure functions over the inputs they are given; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/common.h"

namespace dtrun::scheduler {

// SLURM's compressed host list: items separated by commas outside brackets, each a name with
// any number of bracket groups of numbers and ranges ("a[01-03,7]b", "r[1-2]n[01-02]" = the
// cartesian product, left group outermost). Each range keeps its lower bound's width, so
// "n[08-10,7]" is n08 n09 n10 n7. Order is kept and duplicates are not removed, as scontrol does.
// kInvalidArgument (a message without the variable's name) if malformed or above kMaxHosts.
[[nodiscard]] Result<std::vector<std::string>> expandHostlist(std::string_view text);

// SLURM's run-length lists ("2(x3),1" = 2 2 2 1) in SLURM_TASKS_PER_NODE and its siblings.
[[nodiscard]] Result<std::vector<int>> expandCounts(std::string_view text);

inline constexpr std::size_t kMaxHosts = 1U << 20U;  // a bound on what a host list expands to

enum class Kind : std::uint8_t { kNone, kSlurm, kPbs, kLsf, kFlux, kMpi, kKubeflow };
// "none", "slurm", "pbs", "lsf", "flux", "mpi", "kubeflow"
std::string_view kindName(Kind kind);

// Which environment to read (--scheduler). auto: OMPI_COMM_WORLD_RANK first (Open MPI's mpirun
// started this process, also inside a batch job, whose step variables then describe mpirun's
// daemons), then FLUX_JOB_ID (a Flux job, also in an instance inside another scheduler's job),
// then the one batch job id among SLURM_JOB_ID, PBS_JOBID and LSB_JOBID, then PMIX_RANK or
// PMI_RANK (prterun, MPICH's Hydra; srun's and Flux's own PMI variables count as theirs), then a
// Kubernetes pod (KUBERNETES_SERVICE_HOST) with a Kubeflow operator's MASTER_ADDR, WORLD_SIZE and
// RANK or PET_NNODES and PET_NODE_RANK.
enum class Mode : std::uint8_t { kAuto, kSlurm, kPbs, kLsf, kFlux, kMpi, kKubeflow, kNone };
// "auto", "slurm", "pbs", "lsf", "flux", "mpi", "kubeflow", "none"
std::optional<Mode> parseMode(std::string_view text);

// What detection reads, gathered once by the caller (tests build their own).
struct JobEnvironment {
  std::map<std::string, std::string, std::less<>> env;
  std::string hostName;  // gethostname(): finds this node in PBS_NODEFILE and LSF's host lists
  // A whole file's text (PBS_NODEFILE, LSB_DJOB_HOSTFILE), or nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> readFile =
      [](const std::string&) { return std::optional<std::string>(); };
};

// The allocation as the scheduler describes it to this process.
struct Allocation {
  Kind kind = Kind::kNone;
  // One per node, in the scheduler's order (SLURM, PBS, LSF); empty where the environment names
  // no hosts (MPI launchers, Flux): then nodeCount and nodeIndex are what is known.
  std::vector<std::string> hosts;
  int nodeCount = 0;  // hosts.size() where hosts are known
  int nodeIndex = 0;  // this node's position, 0 .. nodeCount-1
  // The first node's address (hosts[0]; Open MPI: mpirun's address when rank 0 runs beside it),
  // or "" and masterMissing says why and what to pass instead (one line).
  std::string master;
  std::string masterFrom;  // "the first host of SLURM_STEP_NODELIST"
  std::string masterMissing;
  // SLURM "<job>.<step>" (or "<job>" outside a step); PBS_JOBID; LSF "<LSB_JOBID>", with
  // ".<LSB_JOBINDEX>" in a job array; Flux the decimal id of FLUX_JOB_ID; MPI the launcher's job
  // (PMIX_NAMESPACE, Open MPI's jobid); "" where there is none (Hydra).
  std::string jobId;
  // The store's port where the environment names one (Kubeflow's MASTER_PORT), else 0: derived
  // from the job id (jobPort).
  std::uint16_t masterPort = 0;
  std::string masterPortFrom;
  // SLURM: whether srun started this process (SLURM_STEP_ID set). The batch script itself runs
  // on the first node only; the others have no such distinction (true).
  bool inStep = true;
  // Processes the launcher started on this node (SLURM_STEP_TASKS_PER_NODE's entry for this
  // node, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, Flux's tasks per node); 1 where nothing
  // says (PBS and LSF without an MPI launcher's variables, a SLURM batch script).
  int tasksOnThisNode = 1;
  std::string launcher;    // what starts one dtrun per node: "srun", "mpirun", "flux run", ...
  std::string onePerNode;  // its options for one per node: "srun --ntasks-per-node=1"
  std::vector<int> slotsPerNode;  // PBS, LSF: slots per host; SLURM: tasks per node of the step
  // The variables each fact came from, for messages and the launch banner.
  std::string hostsFrom;      // "SLURM_STEP_NODELIST=node[1-2]", "OMPI_COMM_WORLD_SIZE=2"
  std::string nodeIndexFrom;  // "SLURM_NODEID=1", "PBS_NODEFILE position of host node2"
  std::string jobIdFrom;      // "SLURM_JOB_ID+SLURM_STEP_ID", "PBS_JOBID"
  std::string tasksFrom;      // "SLURM_STEP_TASKS_PER_NODE=2(x2)", "" when not read
};

// Reads the allocation. kNone mode, or auto with none of the variables above set: nullopt.
// An explicit mode whose variables are missing, two batch job ids under auto, or any malformed
// value (a bad host list, a node index out of range or node counts that disagree, this host
// absent from PBS_NODEFILE or LSF's hosts, an unreadable host file, a rank beyond its size):
// kInvalidArgument with one line naming the variable, what was wrong and the fix.
[[nodiscard]] Result<std::optional<Allocation>> detect(Mode mode, const JobEnvironment& job);

// The store port for a scheduler-detected multi-node job: 20000 + (J + 7919 * S) mod 10000, with
// J the job id's leading number (a hash of the id when it has none) and S the SLURM step or the
// LSF array index (the number after J; 0 elsewhere). Every node computes the same port with no
// flag; two jobs (or two steps of one job) sharing the first node get different ports unless
// their numbers collide mod 10000; the range stays below Linux's ephemeral ports (32768+), so no
// outgoing connection holds it by chance.
std::uint16_t jobPort(const Allocation& allocation);

// Flux's F58 job id (RFC 19: "ƒ" or "f", then base58 digits) as its number; a decimal id is read
// as it is. nullopt for anything else, or a value beyond 64 bits.
std::optional<std::uint64_t> parseFluxJobId(std::string_view text);

}  // namespace dtrun::scheduler
