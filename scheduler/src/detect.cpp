// Reads SLURM's and PBS's view of the allocation from the environment and PBS_NODEFILE, picks
// the environment to read under --scheduler auto, and derives the job's port.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/scheduler.h"

#include "detect_support.h"

namespace dtrun::scheduler {
namespace detail {

std::optional<long long> parseCount(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) {
    text.remove_prefix(1);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) {
    text.remove_suffix(1);
  }
  long long value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || value < 0) {
    return std::nullopt;
  }
  return value;
}

Result<int> countOf(const Var& var, std::string_view what) {
  const auto n = parseCount(var.second);
  if (!n || *n > static_cast<long long>(kMaxHosts)) {
    return malformed(var, "expected " + std::string(what));
  }
  return static_cast<int>(*n);
}

Status malformed(const Var& var, std::string_view problem) {
  return Status::invalidArgument(var.first + "='" + var.second + "': " + std::string(problem) +
                                 std::string(kBypass));
}

std::string listOf(const std::vector<std::string>& hosts) {
  constexpr std::size_t kShown = 8;
  std::string text;
  for (std::size_t i = 0; i < hosts.size() && i < kShown; ++i) {
    text += (i == 0 ? "" : ", ") + hosts[i];
  }
  if (hosts.size() > kShown) {
    text += ", ... (" + std::to_string(hosts.size()) + " hosts)";
  }
  return text;
}

Status readSlotFile(const Var& var, const std::string& text, Allocation& a) {
  const std::string name = var.first + "='" + var.second + "'";
  std::size_t lineNumber = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) {
      end = text.size();
    }
    ++lineNumber;
    std::string_view line{text};
    line = line.substr(start, end - start);
    start = end + 1;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) {
      continue;
    }
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    if (line.find_first_of(" \t") != std::string_view::npos) {
      return Status::invalidArgument(name + " line " + std::to_string(lineNumber) +
                                     ": expected one host name per line, got '" +
                                     std::string(line) + "'");
    }
    const auto it = std::find(a.hosts.begin(), a.hosts.end(), line);
    if (it == a.hosts.end()) {
      if (a.hosts.size() == kMaxHosts) {
        return Status::invalidArgument(name + ": more than " + std::to_string(kMaxHosts) +
                                       " hosts");
      }
      a.hosts.emplace_back(line);
      a.slotsPerNode.push_back(1);
    } else {
      ++a.slotsPerNode[static_cast<std::size_t>(it - a.hosts.begin())];
    }
  }
  if (a.hosts.empty()) {
    return Status::invalidArgument(name + " lists no host: expected one host name per line");
  }
  return Status::ok();
}

namespace {
std::string_view shortName(std::string_view host) { return host.substr(0, host.find('.')); }
}  // namespace

Result<int> locateHost(const Allocation& a, const std::string& hostName, const std::string& where,
                       std::string_view how) {
  auto here = std::find(a.hosts.begin(), a.hosts.end(), hostName);
  if (here == a.hosts.end()) {
    const std::string_view wanted = shortName(hostName);
    const auto sameShort = [wanted](const std::string& h) { return shortName(h) == wanted; };
    here = std::find_if(a.hosts.begin(), a.hosts.end(), sameShort);
    if (here != a.hosts.end() && std::count_if(a.hosts.begin(), a.hosts.end(), sameShort) > 1) {
      return Status::invalidArgument(where + ": this host '" + hostName +
                                     "' matches several of its hosts by short name (" +
                                     listOf(a.hosts) + "); pass --node_rank");
    }
  }
  if (here == a.hosts.end()) {
    return Status::invalidArgument(
        where + ": this host '" + hostName + "' is not among its hosts (" + listOf(a.hosts) +
        "); start dtrun on the job's hosts (" + std::string(how) +
        "), or pass --scheduler none and give --nnodes, --node_rank and --master_addr yourself");
  }
  return static_cast<int>(here - a.hosts.begin());
}

void useHostList(Allocation& a, std::string_view listVar) {
  a.nodeCount = static_cast<int>(a.hosts.size());
  a.master = a.hosts.front();
  a.masterFrom = "the first host of " + std::string(listVar);
}

}  // namespace detail

namespace {

using detail::Env;
using detail::kBypass;
using detail::malformed;
using detail::parseCount;

Result<Allocation> detectSlurm(const Env& env) {
  Allocation a;
  a.kind = Kind::kSlurm;
  a.launcher = "srun";
  a.onePerNode = "srun --ntasks-per-node=1";
  const auto job = env.first({"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job || job->second.empty()) {
    return Status::invalidArgument(
        "--scheduler slurm: SLURM_JOB_ID is not set, so this is not inside a SLURM job (start "
        "dtrun through srun or sbatch, or use --scheduler auto or none)");
  }
  const auto step = env.first({"SLURM_STEP_ID", "SLURM_STEPID"});
  a.inStep = step.has_value();
  a.jobId = a.inStep ? job->second + "." + step->second : job->second;
  a.jobIdFrom = a.inStep ? job->first + "+" + step->first : job->first;

  // srun's variables describe the step (which may use part of the job's nodes, and which
  // SLURM_NODEID counts within); the batch script has only the job's.
  const auto nodelist =
      a.inStep ? env.first({"SLURM_STEP_NODELIST", "SLURM_NODELIST", "SLURM_JOB_NODELIST"})
               : env.first({"SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!nodelist) {
    return Status::invalidArgument(job->first + " is set but SLURM_JOB_NODELIST is not" +
                                   std::string(kBypass));
  }
  auto hosts = expandHostlist(nodelist->second);
  if (!hosts.isOk()) {
    return malformed(*nodelist, hosts.status().message());
  }
  a.hosts = std::move(hosts).value();
  a.hostsFrom = nodelist->first + "=" + nodelist->second;
  detail::useHostList(a, nodelist->first);
  const int nodes = a.nodeCount;

  const auto count = a.inStep ? env.first({"SLURM_STEP_NUM_NODES", "SLURM_NNODES"})
                              : env.first({"SLURM_JOB_NUM_NODES", "SLURM_NNODES"});
  if (count) {
    const auto n = parseCount(count->second);
    if (!n) {
      return malformed(*count, "expected a node count");
    }
    if (*n != nodes) {
      return malformed(
          *count, "disagrees with the " + std::to_string(nodes) + " host(s) of " + a.hostsFrom);
    }
  }

  if (const auto nodeId = env.first({"SLURM_NODEID"})) {
    const auto index = parseCount(nodeId->second);
    if (!index) {
      return malformed(*nodeId, "expected a node index");
    }
    if (*index >= nodes) {
      return malformed(
          *nodeId, "out of range for the " + std::to_string(nodes) + " host(s) of " + a.hostsFrom);
    }
    a.nodeIndex = static_cast<int>(*index);
    a.nodeIndexFrom = nodeId->first + "=" + nodeId->second;
  } else if (nodes > 1) {
    return Status::invalidArgument("SLURM_NODEID is not set in a " + std::to_string(nodes) +
                                   "-node job (" + a.hostsFrom + ")" + std::string(kBypass));
  } else {
    a.nodeIndexFrom = "the only host of " + nodelist->first;
  }

  // Outside a step SLURM_TASKS_PER_NODE is the job's reservation, which says nothing about how
  // many dtrun processes run here. SLURM_NTASKS_PER_NODE is not read at all: srun inherits it
  // from sbatch's options even when the step itself runs one task per node.
  if (a.inStep) {
    if (const auto tasks = env.first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})) {
      auto counts = expandCounts(tasks->second);
      if (!counts.isOk()) {
        return malformed(*tasks, counts.status().message());
      }
      if (counts.value().size() != a.hosts.size()) {
        return malformed(*tasks, "has " + std::to_string(counts.value().size()) +
                                     " entries for the " + std::to_string(nodes) + " host(s) of " +
                                     a.hostsFrom);
      }
      a.slotsPerNode = std::move(counts).value();
      a.tasksOnThisNode = a.slotsPerNode[static_cast<std::size_t>(a.nodeIndex)];
      a.tasksFrom = tasks->first + "=" + tasks->second;
    }
  }
  return a;
}

Result<Allocation> detectPbs(const Env& env, const JobEnvironment& job) {
  Allocation a;
  a.kind = Kind::kPbs;
  a.launcher = "pbsdsh";
  a.onePerNode = "pbsdsh -u";
  const auto jobId = env.first({"PBS_JOBID"});
  if (!jobId || jobId->second.empty()) {
    return Status::invalidArgument(
        "--scheduler pbs: PBS_JOBID is not set, so this is not inside a PBS job (use "
        "--scheduler auto or none)");
  }
  a.jobId = jobId->second;
  a.jobIdFrom = jobId->first;
  const auto nodefile = env.first({"PBS_NODEFILE"});
  if (!nodefile || nodefile->second.empty()) {
    return Status::invalidArgument(
        "PBS_JOBID is set but PBS_NODEFILE is not: export PBS_NODEFILE=<the job's node file>, or "
        "pass --scheduler none and give --nnodes, --node_rank and --master_addr yourself");
  }
  const auto text = job.readFile(nodefile->second);
  if (!text) {
    return Status::invalidArgument(
        "PBS_NODEFILE='" + nodefile->second +
        "' cannot be read (PBS writes it on the job's first host only): copy it to a shared "
        "directory and export PBS_NODEFILE=<the copy> on every node, or pass --scheduler none "
        "and give --nnodes, --node_rank and --master_addr yourself");
  }
  // One host per line, repeated per slot (PBS Pro's mpiprocs, Torque's ppn); the order of first
  // appearance is the node order.
  DTRUN_TRY(detail::readSlotFile(*nodefile, *text, a));
  a.hostsFrom = "PBS_NODEFILE=" + nodefile->second;
  detail::useHostList(a, "PBS_NODEFILE");

  // This host by its exact name, else by its short name (a nodefile of FQDNs on hosts whose
  // hostname is short, or the other way round), which must then be unambiguous.
  DTRUN_ASSIGN_OR_RETURN(
      const int index,
      detail::locateHost(a, job.hostName, "PBS_NODEFILE='" + nodefile->second + "'",
                         "pbsdsh, or mpiexec with one process per host"));
  a.nodeIndex = index;
  a.nodeIndexFrom = "PBS_NODEFILE position of host " + a.hosts[static_cast<std::size_t>(index)];
  return a;
}

// Under auto: which of the batch schedulers' job ids are set. Several is an error.
Result<Mode> batchMode(const Env& env) {
  struct Batch {
    Mode mode;
    std::string_view var;
    std::string_view name;
  };
  static constexpr std::array<Batch, 3> kBatch = {Batch{Mode::kSlurm, "SLURM_JOB_ID", "slurm"},
                                                  Batch{Mode::kPbs, "PBS_JOBID", "pbs"},
                                                  Batch{Mode::kLsf, "LSB_JOBID", "lsf"}};
  std::vector<const Batch*> set;
  for (const Batch& batch : kBatch) {
    if (env.has(batch.var) || (batch.mode == Mode::kSlurm && env.has("SLURM_JOBID"))) {
      set.push_back(&batch);
    }
  }
  if (set.empty()) {
    return Mode::kNone;
  }
  if (set.size() == 1) {
    return set.front()->mode;
  }
  std::string vars;
  std::string options;
  for (std::size_t i = 0; i < set.size(); ++i) {
    const std::string_view sep = i == 0 ? "" : i + 1 == set.size() ? " and " : ", ";
    vars += std::string(sep) + std::string(set[i]->var);
    options += "--scheduler " + std::string(set[i]->name) + ", ";
  }
  options.resize(options.size() - 2);
  return Status::invalidArgument((set.size() == 2 ? "both " : "") + vars + " are set: pass " +
                                 options + " or --scheduler none");
}

}  // namespace

std::string_view kindName(Kind kind) {
  switch (kind) {
    case Kind::kSlurm:
      return "slurm";
    case Kind::kPbs:
      return "pbs";
    case Kind::kLsf:
      return "lsf";
    case Kind::kFlux:
      return "flux";
    case Kind::kMpi:
      return "mpi";
    case Kind::kKubeflow:
      return "kubeflow";
    case Kind::kNone:
      break;
  }
  return "none";
}

std::optional<Mode> parseMode(std::string_view text) {
  static constexpr std::array<std::pair<std::string_view, Mode>, 8> kModes = {
      std::pair{"auto", Mode::kAuto},         std::pair{"slurm", Mode::kSlurm},
      std::pair{"pbs", Mode::kPbs},           std::pair{"lsf", Mode::kLsf},
      std::pair{"flux", Mode::kFlux},         std::pair{"mpi", Mode::kMpi},
      std::pair{"kubeflow", Mode::kKubeflow}, std::pair{"none", Mode::kNone}};
  for (const auto& [name, mode] : kModes) {
    if (text == name) {
      return mode;
    }
  }
  return std::nullopt;
}

Result<std::optional<Allocation>> detect(Mode mode, const JobEnvironment& job) {
  const Env env(job);
  if (mode == Mode::kAuto) {
    // Open MPI's variables: mpirun started this process (inside a batch job too, where the
    // scheduler's step variables describe mpirun's daemons, not dtrun). A Flux job's tasks next:
    // Flux clears SLURM_* and PMI_* for its jobs, but an instance may run inside any scheduler.
    if (env.has("OMPI_COMM_WORLD_RANK")) {
      mode = Mode::kMpi;
    } else if (env.has("FLUX_JOB_ID")) {
      mode = Mode::kFlux;
    } else {
      DTRUN_ASSIGN_OR_RETURN(mode, batchMode(env));
      // PMIx or PMI ranks alone: prterun or Hydra. Inside a batch job they come from its own
      // launcher (srun --mpi=pmix) or from an MPI launcher that the job's host list covers.
      if (mode == Mode::kNone && (env.has("PMIX_RANK") || env.has("PMI_RANK"))) {
        mode = Mode::kMpi;
      } else if (mode == Mode::kNone && detail::looksLikeKubeflowPod(env)) {
        mode = Mode::kKubeflow;
      }
    }
  }
  if (mode == Mode::kAuto || mode == Mode::kNone) {
    return std::optional<Allocation>();
  }
  const auto read = [&]() -> Result<Allocation> {
    switch (mode) {
      case Mode::kSlurm:
        return detectSlurm(env);
      case Mode::kPbs:
        return detectPbs(env, job);
      case Mode::kLsf:
        return detail::detectLsf(env);
      case Mode::kFlux:
        return detail::detectFlux(env);
      case Mode::kKubeflow:
        return detail::detectKubeflow(env);
      case Mode::kMpi:
      case Mode::kAuto:
      case Mode::kNone:
        break;
    }
    return detail::detectMpi(env);
  };
  DTRUN_ASSIGN_OR_RETURN(auto a, read());
  if (a.kind == Kind::kSlurm || a.kind == Kind::kPbs || a.kind == Kind::kLsf) {
    detail::useMpiLocalSize(env, a);
  }
  return std::optional<Allocation>(std::move(a));
}

std::uint16_t jobPort(const Allocation& allocation) {
  const std::string_view id = allocation.jobId;
  const auto digits = std::min(id.find_first_not_of("0123456789"), id.size());
  // The last 18 digits of the leading number: its value mod 10000 is all that counts, and a Flux
  // id's last digits are the ones that differ between jobs.
  constexpr std::size_t kJobIdDigits = 18;
  const std::string_view leading =
      id.substr(digits > kJobIdDigits ? digits - kJobIdDigits : 0, std::min(digits, kJobIdDigits));
  std::uint64_t job = 0;
  if (leading.empty()) {
    job = 14695981039346656037ULL;  // FNV-1a: any id text still maps to a fixed port
    for (const char c : id) {
      job = (job ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    }
  } else {
    std::from_chars(leading.data(), leading.data() + leading.size(), job);
  }
  std::uint64_t step = 0;
  const bool numbered = (allocation.kind == Kind::kSlurm && allocation.inStep) ||
                        allocation.kind == Kind::kLsf;  // the step, the array index
  if (numbered && digits < id.size()) {
    const std::string_view rest = id.substr(digits + 1, 9);
    std::from_chars(rest.data(), rest.data() + rest.size(), step);
  }
  constexpr std::uint64_t kBase = 20000;
  constexpr std::uint64_t kSpan = 10000;
  constexpr std::uint64_t kStepStride = 7919;  // spreads the steps of one job far apart
  return static_cast<std::uint16_t>(kBase + (job % kSpan + kStepStride * (step % kSpan)) % kSpan);
}

}  // namespace dtrun::scheduler
