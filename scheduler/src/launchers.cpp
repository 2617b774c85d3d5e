// Reads the job from what MPI launchers (Open MPI's mpirun/prterun, MPICH's Hydra and Intel MPI),
// Flux's `flux run` and LSF export to the processes they start.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/scheduler.h"

#include "detect_support.h"

namespace dtrun::scheduler {
namespace detail {
namespace {

// What to pass when the environment names no first host (one line, after the reason).
constexpr std::string_view kGiveMaster =
    "pass --master_addr=<the host of rank 0> (the port is derived from the job unless "
    "--master_port is given), or --rdzv_backend=c10d --rdzv_endpoint=<host>:<port>";

// The first address of an Open MPI 4 contact URI: "<jobid>.<vpid>;tcp://10.0.0.1,10.1.0.1:4711;
// tcp6://[fe80::1]:4712" -> 10.0.0.1 (IPv4 first, as the daemons connect).
std::optional<std::string> uriAddress(std::string_view uri) {
  for (const std::string_view scheme : {std::string_view("tcp://"), std::string_view("tcp6://")}) {
    std::size_t at = 0;
    while ((at = uri.find(scheme, at)) != std::string_view::npos) {
      if (at != 0 && uri[at - 1] != ';') {
        at += scheme.size();
        continue;
      }
      std::string_view item = uri.substr(at + scheme.size());
      item = item.substr(0, item.find(';'));
      item = item.substr(0, item.rfind(':'));  // the port
      item = item.substr(0, item.find(','));   // the first of the addresses
      if (item.size() > 2 && item.front() == '[' && item.back() == ']') {
        item = item.substr(1, item.size() - 2);
      }
      if (!item.empty()) {
        return std::string(item);
      }
      break;
    }
  }
  return std::nullopt;
}

// Open MPI 4's mpirun exports its own contact URI (the HNP) and each process's daemon's: a
// process whose daemon is the HNP runs on mpirun's host. Rank 0 there makes mpirun's address the
// first node's; rank 0 elsewhere (mpirun on a login node) cannot be found from the environment.
void ompiMaster(const Env& env, Allocation& a) {
  const auto hnp = env.first({"OMPI_MCA_orte_hnp_uri"});
  if (!hnp) {
    a.masterMissing =
        "mpirun exports no host of rank 0 (Open MPI 5 and PRRTE have no OMPI_MCA_orte_hnp_uri): " +
        std::string(kGiveMaster);
    return;
  }
  const auto address = uriAddress(hnp->second);
  if (!address) {
    a.masterMissing =
        hnp->first + "='" + hnp->second + "' holds no tcp address: " + std::string(kGiveMaster);
    return;
  }
  if (const auto local = env.first({"OMPI_MCA_orte_local_daemon_uri"})) {
    const bool besideMpirun = local->second == hnp->second;
    if (a.nodeIndex == 0 && !besideMpirun) {
      a.masterMissing =
          "rank 0 does not run on mpirun's host (OMPI_MCA_orte_local_daemon_uri is not "
          "OMPI_MCA_orte_hnp_uri), so mpirun's address is not the first node's: start mpirun on "
          "the first node of its host list, or " +
          std::string(kGiveMaster);
      return;
    }
    if (a.nodeIndex != 0 && besideMpirun && a.nodeCount > 1) {
      a.masterMissing = "rank " + std::to_string(a.nodeIndex) +
                        " runs on mpirun's host, so rank 0 does not and mpirun's address is not "
                        "the first node's: start mpirun on the first node of its host list, or " +
                        std::string(kGiveMaster);
      return;
    }
  }
  a.master = *address;
  a.masterFrom = "mpirun's address in OMPI_MCA_orte_hnp_uri, beside rank 0";
}

// The local size an MPI launcher other than Open MPI's exports (Hydra, Intel MPI, some PMIx).
std::optional<Var> mpiLocalSize(const Env& env) {
  return env.first({"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE", "PMIX_LOCAL_SIZE"});
}

}  // namespace

Result<Allocation> detectMpi(const Env& env) {
  Allocation a;
  a.kind = Kind::kMpi;
  std::optional<Var> rank;
  std::optional<Var> size;
  std::optional<Var> localSize;
  const bool ompi = env.has("OMPI_COMM_WORLD_RANK");
  if (ompi) {
    // Open MPI: mpirun 4 (ORTE), mpirun/prterun 5 with Open MPI's personality.
    rank = env.first({"OMPI_COMM_WORLD_RANK"});
    size = env.first({"OMPI_COMM_WORLD_SIZE"});
    localSize = env.first({"OMPI_COMM_WORLD_LOCAL_SIZE"});
    a.launcher = "mpirun";
    a.onePerNode = "mpirun --map-by ppr:1:node";
  } else {
    // PMIx (prterun) or PMI-1/2 (MPICH's Hydra, Intel MPI's mpiexec).
    rank = env.first({"PMIX_RANK", "PMI_RANK"});
    size = env.first({"PMIX_SIZE", "PMI_SIZE"});
    localSize = mpiLocalSize(env);
    a.launcher = "mpiexec";
    a.onePerNode = "mpiexec -ppn 1";
  }
  if (!rank) {
    return Status::invalidArgument(
        "--scheduler mpi: none of OMPI_COMM_WORLD_RANK, PMIX_RANK and PMI_RANK is set, so no MPI "
        "launcher started this process (start dtrun with mpirun or mpiexec, one per node, or use "
        "--scheduler auto or none)");
  }
  if (!size) {
    return Status::invalidArgument(
        rank->first + " is set but no job size (OMPI_COMM_WORLD_SIZE, PMIX_SIZE or PMI_SIZE): " +
        "pass --scheduler none and give --nnodes, --node_rank and --master_addr yourself");
  }
  DTRUN_ASSIGN_OR_RETURN(a.nodeCount, countOf(*size, "a process count"));
  DTRUN_ASSIGN_OR_RETURN(a.nodeIndex, countOf(*rank, "a rank"));
  if (a.nodeCount == 0 || a.nodeIndex >= a.nodeCount) {
    return malformed(*rank, "out of range for " + size->first + "=" + size->second);
  }
  a.hostsFrom = size->first + "=" + size->second;
  a.nodeIndexFrom = rank->first + "=" + rank->second;
  if (localSize) {
    DTRUN_ASSIGN_OR_RETURN(a.tasksOnThisNode, countOf(*localSize, "a process count"));
    a.tasksFrom = localSize->first + "=" + localSize->second;
  }
  // The job: PMIx's namespace (Open MPI 4 and 5, prterun), else ORTE's job id; Hydra has none.
  if (const auto job = env.first({"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"})) {
    a.jobId = job->second;
    a.jobIdFrom = job->first;
  }
  if (ompi) {
    ompiMaster(env, a);
  } else {
    a.masterMissing = a.launcher + " exports no host of rank 0 (" + rank->first +
                      " and its siblings only): " + std::string(kGiveMaster);
  }
  return a;
}

Result<Allocation> detectFlux(const Env& env) {
  Allocation a;
  a.kind = Kind::kFlux;
  a.launcher = "flux run";
  a.onePerNode = "flux run -N<nodes> --tasks-per-node=1";
  const auto id = env.first({"FLUX_JOB_ID"});
  if (!id || id->second.empty()) {
    return Status::invalidArgument(
        "--scheduler flux: FLUX_JOB_ID is not set, so this is not a task of a Flux job (start "
        "dtrun with flux run, one task per node, or use --scheduler auto or none)");
  }
  const auto number = parseFluxJobId(id->second);
  if (!number) {
    return malformed(*id, "expected a Flux job id (F58 such as fuZZybuNNy, or decimal)");
  }
  a.jobId = std::to_string(*number);
  a.jobIdFrom = id->first + "=" + id->second;
  const auto nodes = env.first({"FLUX_JOB_NNODES"});
  const auto rank = env.first({"FLUX_TASK_RANK"});
  if (!nodes || !rank) {
    return Status::invalidArgument(
        std::string("FLUX_JOB_ID is set but ") + (nodes ? "FLUX_TASK_RANK" : "FLUX_JOB_NNODES") +
        " is not, so this is not a task of flux run (the batch script of flux batch is not): "
        "start dtrun with flux run -N<nodes> --tasks-per-node=1, or pass --scheduler none");
  }
  DTRUN_ASSIGN_OR_RETURN(a.nodeCount, countOf(*nodes, "a node count"));
  DTRUN_ASSIGN_OR_RETURN(const int taskRank, countOf(*rank, "a task rank"));
  a.hostsFrom = nodes->first + "=" + nodes->second;
  int tasks = a.nodeCount;
  if (const auto size = env.first({"FLUX_JOB_SIZE"})) {
    DTRUN_ASSIGN_OR_RETURN(tasks, countOf(*size, "a task count"));
  }
  if (a.nodeCount == 0 || taskRank >= std::max(tasks, a.nodeCount)) {
    return malformed(*rank, "out of range for " + a.hostsFrom);
  }
  // One task per node: the task rank is the node's place in the job. Several (refused later):
  // the node of the task under Flux's default block mapping, where some hold the ceiling.
  int perNode = 1;
  if (tasks > a.nodeCount) {
    perNode = (tasks + a.nodeCount - 1) / a.nodeCount;
    a.tasksOnThisNode = perNode;
    a.tasksFrom = "FLUX_JOB_SIZE=" + std::to_string(tasks) + " on " + a.hostsFrom;
  }
  a.nodeIndex = std::min(taskRank / perNode, a.nodeCount - 1);
  a.nodeIndexFrom = rank->first + "=" + rank->second;
  a.masterMissing =
      "flux run exports no host (FLUX_JOB_ID, FLUX_TASK_RANK): pass --master_addr=<the host of "
      "task 0> (flux run ... sh -c 'dtrun --master_addr=$(flux hostlist -n 0 local) ...'), or "
      "--rdzv_backend=c10d --rdzv_endpoint=<host>:<port>";
  return a;
}

Result<Allocation> detectLsf(const Env& env) {
  Allocation a;
  a.kind = Kind::kLsf;
  a.launcher = "blaunch";
  a.onePerNode = "blaunch -z \"<each host once>\"";
  const auto id = env.first({"LSB_JOBID"});
  if (!id || id->second.empty()) {
    return Status::invalidArgument(
        "--scheduler lsf: LSB_JOBID is not set, so this is not inside an LSF job (start dtrun "
        "with blaunch, one per host, or use --scheduler auto or none)");
  }
  a.jobId = id->second;
  a.jobIdFrom = id->first;
  // Elements of a job array share LSB_JOBID; the index tells them apart (and their ports).
  if (const auto index = env.first({"LSB_JOBINDEX"});
      index && !index->second.empty() && index->second != "0") {
    a.jobId += "." + index->second;
    a.jobIdFrom += "+" + index->first;
  }
  // "host slots host slots ...": one pair per host, the first host the one the batch script runs
  // on. Else the host file (a line per slot), else LSB_HOSTS (a word per slot).
  std::optional<Var> list;
  if (const auto mcpu = env.first({"LSB_MCPU_HOSTS"})) {
    list = mcpu;
    std::vector<std::string_view> words;
    std::string_view rest = mcpu->second;
    while (!rest.empty()) {
      const auto start = rest.find_first_not_of(" \t");
      if (start == std::string_view::npos) {
        break;
      }
      rest.remove_prefix(start);
      const auto end = std::min(rest.find_first_of(" \t"), rest.size());
      words.push_back(rest.substr(0, end));
      rest.remove_prefix(end);
    }
    if (words.empty() || words.size() % 2 != 0) {
      return malformed(*mcpu, "expected pairs of a host and its slot count");
    }
    for (std::size_t i = 0; i < words.size(); i += 2) {
      const auto slots = parseCount(words[i + 1]);
      if (!slots || *slots == 0) {
        return malformed(*mcpu, "'" + std::string(words[i + 1]) + "' after host '" +
                                    std::string(words[i]) + "' is not a slot count");
      }
      if (std::find(a.hosts.begin(), a.hosts.end(), words[i]) != a.hosts.end()) {
        return malformed(*mcpu, "host '" + std::string(words[i]) + "' appears twice");
      }
      if (a.hosts.size() == kMaxHosts) {
        return malformed(*mcpu, "more than " + std::to_string(kMaxHosts) + " hosts");
      }
      a.hosts.emplace_back(words[i]);
      a.slotsPerNode.push_back(static_cast<int>(*slots));
    }
    a.hostsFrom = mcpu->first + "=" + mcpu->second;
    useHostList(a, mcpu->first);
  } else if (const auto file = env.first({"LSB_DJOB_HOSTFILE"})) {
    list = file;
    const auto text = env.job().readFile(file->second);
    if (!text) {
      return Status::invalidArgument(
          "LSB_DJOB_HOSTFILE='" + file->second +
          "' cannot be read: export LSB_MCPU_HOSTS as LSF sets it, or pass --scheduler none and "
          "give --nnodes, --node_rank and --master_addr yourself");
    }
    DTRUN_TRY(readSlotFile(*file, *text, a));
    a.hostsFrom = file->first + "=" + file->second;
    useHostList(a, file->first);
  } else if (const auto hosts = env.first({"LSB_HOSTS"})) {
    list = hosts;
    std::string lines = hosts->second;  // a word per slot, as a host file's lines
    std::replace_if(
        lines.begin(), lines.end(), [](char c) { return c == ' ' || c == '\t'; }, '\n');
    if (lines.find_first_not_of('\n') == std::string::npos) {
      return malformed(*hosts, "lists no host");
    }
    DTRUN_TRY(readSlotFile(*hosts, lines, a));
    a.hostsFrom = hosts->first + "=" + hosts->second;
    useHostList(a, hosts->first);
  } else {
    return Status::invalidArgument(
        "LSB_JOBID is set but none of LSB_MCPU_HOSTS, LSB_DJOB_HOSTFILE and LSB_HOSTS is: run "
        "dtrun inside the LSF job (blaunch), or pass --scheduler none and give --nnodes, "
        "--node_rank and --master_addr yourself");
  }
  DTRUN_ASSIGN_OR_RETURN(
      a.nodeIndex,
      locateHost(a, env.job().hostName, list->first + "='" + list->second + "'",
                 "blaunch -z with each host once, or mpirun with one process per host"));
  a.nodeIndexFrom =
      list->first + " position of host " + a.hosts[static_cast<std::size_t>(a.nodeIndex)];
  return a;
}

void useMpiLocalSize(const Env& env, Allocation& a) {
  if (a.tasksOnThisNode > 1) {
    return;
  }
  const auto local = mpiLocalSize(env);
  if (!local) {
    return;
  }
  const auto n = parseCount(local->second);
  if (n && *n > 1 && *n <= static_cast<long long>(kMaxHosts)) {
    a.tasksOnThisNode = static_cast<int>(*n);
    a.tasksFrom = local->first + "=" + local->second;
    a.launcher = "mpiexec";
    a.onePerNode = "mpiexec -ppn 1";
  }
}

}  // namespace detail

std::optional<std::uint64_t> parseFluxJobId(std::string_view text) {
  // RFC 19: F58 is "ƒ" (U+0192) or ASCII "f", then base58 digits, most significant first.
  constexpr std::string_view kAlphabet =
      "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
  constexpr std::string_view kPrefix = "\xc6\x92";
  std::uint64_t base = 58;
  std::string_view alphabet = kAlphabet;
  if (text.starts_with(kPrefix)) {
    text.remove_prefix(kPrefix.size());
  } else if (text.starts_with('f')) {
    text.remove_prefix(1);
  } else {
    base = 10;
    alphabet = "0123456789";
  }
  if (text.empty()) {
    return std::nullopt;
  }
  std::uint64_t value = 0;
  for (const char c : text) {
    const auto digit = alphabet.find(c);
    if (digit == std::string_view::npos || value > (UINT64_MAX - digit) / base) {
      return std::nullopt;
    }
    value = value * base + digit;
  }
  return value;
}

}  // namespace dtrun::scheduler
