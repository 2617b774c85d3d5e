// Batch-scheduler detection: what SLURM or PBS says about the allocation dtrun runs in (hosts in
// the scheduler's order, this node's index, the job id), read natively from the environment and
// PBS_NODEFILE (no scontrol). Pure functions over the inputs they are given; thread-compatible.
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

enum class Kind : std::uint8_t { kNone, kSlurm, kPbs };
std::string_view kindName(Kind kind);  // "none", "slurm", "pbs"

// Which scheduler to read (--scheduler): auto picks the one whose job id is set.
enum class Mode : std::uint8_t { kAuto, kSlurm, kPbs, kNone };
std::optional<Mode> parseMode(std::string_view text);  // "auto", "slurm", "pbs", "none"

// What detection reads, gathered once by the caller (tests build their own).
struct JobEnvironment {
  std::map<std::string, std::string, std::less<>> env;
  std::string hostName;  // gethostname(): finds this node in PBS_NODEFILE
  // A whole file's text (PBS_NODEFILE), or nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string& path)> readFile =
      [](const std::string&) { return std::optional<std::string>(); };
};

// The allocation as the scheduler describes it to this process.
struct Allocation {
  Kind kind = Kind::kNone;
  std::vector<std::string> hosts;  // one per node, in the scheduler's order; hosts[0] = master
  int nodeIndex = 0;               // this node's position in hosts
  std::string jobId;               // SLURM "<job>.<step>" (or "<job>" outside a step); PBS_JOBID
  // SLURM: whether srun started this process (SLURM_STEP_ID set). The batch script itself runs
  // on the first node only; PBS has no such distinction (true).
  bool inStep = true;
  // Processes the scheduler started on this node for this step (SLURM_STEP_TASKS_PER_NODE's
  // entry for this node; 1 outside a step and under PBS, where nothing starts dtrun per slot).
  int tasksOnThisNode = 1;
  std::vector<int> slotsPerNode;  // PBS: nodefile lines per host; SLURM: tasks per node of the step
  // The variables each fact came from, for messages and the launch banner.
  std::string hostsFrom;      // "SLURM_STEP_NODELIST=node[1-2]", "PBS_NODEFILE=/var/spool/..."
  std::string nodeIndexFrom;  // "SLURM_NODEID=1", "PBS_NODEFILE line of host node2"
  std::string jobIdFrom;      // "SLURM_JOB_ID+SLURM_STEP_ID", "PBS_JOBID"
  std::string tasksFrom;      // "SLURM_STEP_TASKS_PER_NODE=2(x2)", "" when not read
};

// Reads the allocation. kNone mode, or auto with neither SLURM_JOB_ID nor PBS_JOBID set: nullopt.
// An explicit mode whose job id is missing, both job ids set under auto, or any malformed value
// (bad host list, SLURM_NODEID out of range or disagreeing node counts, this host absent from
// PBS_NODEFILE, an unreadable nodefile): kInvalidArgument with one line naming the variable, what
// was wrong and the fix.
[[nodiscard]] Result<std::optional<Allocation>> detect(Mode mode, const JobEnvironment& job);

// The store port for a scheduler-detected multi-node job: 20000 + (J + 7919 * S) mod 10000, with
// J the job id's leading number (a hash of the id when it has none) and S the SLURM step (0
// outside a step and under PBS). Every
// node computes the same port with no flag; two jobs (or two steps of one job) sharing the first
// node get different ports unless their numbers collide mod 10000; the range stays below Linux's
// ephemeral ports (32768+), so no outgoing connection holds it by chance.
std::uint16_t jobPort(const Allocation& allocation);

}  // namespace dtrun::scheduler
