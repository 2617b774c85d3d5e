// Reads SLURM's and PBS's view of the allocation from the environment and PBS_NODEFILE.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrun/scheduler.h"

namespace dtrun::scheduler {
namespace {

// Appended to errors about values the scheduler wrote: they cannot be fixed by the user, only
// bypassed.
constexpr std::string_view kBypass =
    "; if it was rewritten by hand, unset it, or pass --scheduler none and give --nnodes, "
    "--node_rank and --master_addr yourself";

class Env {
 public:
  explicit Env(const JobEnvironment& job) : job_(job) {}

  // The first of `names` that is set: its name and value.
  [[nodiscard]] std::optional<std::pair<std::string, std::string>> first(
      std::initializer_list<std::string_view> names) const {
    for (const std::string_view name : names) {
      if (const auto it = job_.env.find(name); it != job_.env.end()) {
        return std::pair{std::string(name), it->second};
      }
    }
    return std::nullopt;
  }

 private:
  const JobEnvironment& job_;  // outlives this view, a local of detect()
};

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

Status malformed(const std::pair<std::string, std::string>& var, std::string_view problem) {
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

Result<Allocation> detectSlurm(const Env& env) {
  Allocation a;
  a.kind = Kind::kSlurm;
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
  const int nodes = static_cast<int>(a.hosts.size());

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

std::string_view shortName(std::string_view host) { return host.substr(0, host.find('.')); }

Result<Allocation> detectPbs(const Env& env, const JobEnvironment& job) {
  Allocation a;
  a.kind = Kind::kPbs;
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
  std::size_t lineNumber = 0;
  std::size_t start = 0;
  while (start < text->size()) {
    auto end = text->find('\n', start);
    if (end == std::string::npos) {
      end = text->size();
    }
    ++lineNumber;
    std::string_view line{*text};
    line = line.substr(start, end - start);
    start = end + 1;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) {
      continue;
    }
    line = line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
    if (line.find_first_of(" \t") != std::string_view::npos) {
      return Status::invalidArgument(
          "PBS_NODEFILE='" + nodefile->second + "' line " + std::to_string(lineNumber) +
          ": expected one host name per line, got '" + std::string(line) + "'");
    }
    const auto it = std::find(a.hosts.begin(), a.hosts.end(), line);
    if (it == a.hosts.end()) {
      if (a.hosts.size() == kMaxHosts) {
        return Status::invalidArgument("PBS_NODEFILE='" + nodefile->second + "': more than " +
                                       std::to_string(kMaxHosts) + " hosts");
      }
      a.hosts.emplace_back(line);
      a.slotsPerNode.push_back(1);
    } else {
      ++a.slotsPerNode[static_cast<std::size_t>(it - a.hosts.begin())];
    }
  }
  if (a.hosts.empty()) {
    return Status::invalidArgument("PBS_NODEFILE='" + nodefile->second +
                                   "' lists no host: expected one host name per line");
  }
  a.hostsFrom = "PBS_NODEFILE=" + nodefile->second;

  // This host by its exact name, else by its short name (a nodefile of FQDNs on hosts whose
  // hostname is short, or the other way round), which must then be unambiguous.
  auto here = std::find(a.hosts.begin(), a.hosts.end(), job.hostName);
  if (here == a.hosts.end()) {
    const std::string_view wanted = shortName(job.hostName);
    const auto sameShort = [wanted](const std::string& h) { return shortName(h) == wanted; };
    here = std::find_if(a.hosts.begin(), a.hosts.end(), sameShort);
    if (here != a.hosts.end() && std::count_if(a.hosts.begin(), a.hosts.end(), sameShort) > 1) {
      return Status::invalidArgument("PBS_NODEFILE='" + nodefile->second + "': this host '" +
                                     job.hostName +
                                     "' matches several of its hosts by short name (" +
                                     listOf(a.hosts) + "); pass --node_rank");
    }
  }
  if (here == a.hosts.end()) {
    return Status::invalidArgument(
        "PBS_NODEFILE='" + nodefile->second + "': this host '" + job.hostName +
        "' is not among its hosts (" + listOf(a.hosts) +
        "); start dtrun on the job's hosts (pbsdsh, or mpiexec with one process per host), or "
        "pass --scheduler none and give --nnodes, --node_rank and --master_addr yourself");
  }
  a.nodeIndex = static_cast<int>(here - a.hosts.begin());
  a.nodeIndexFrom = "PBS_NODEFILE position of host " + *here;
  return a;
}

}  // namespace

std::string_view kindName(Kind kind) {
  switch (kind) {
    case Kind::kSlurm:
      return "slurm";
    case Kind::kPbs:
      return "pbs";
    case Kind::kNone:
      break;
  }
  return "none";
}

std::optional<Mode> parseMode(std::string_view text) {
  if (text == "auto") {
    return Mode::kAuto;
  }
  if (text == "slurm") {
    return Mode::kSlurm;
  }
  if (text == "pbs") {
    return Mode::kPbs;
  }
  if (text == "none") {
    return Mode::kNone;
  }
  return std::nullopt;
}

Result<std::optional<Allocation>> detect(Mode mode, const JobEnvironment& job) {
  const Env env(job);
  if (mode == Mode::kAuto) {
    const bool slurm = env.first({"SLURM_JOB_ID", "SLURM_JOBID"}).has_value();
    const bool pbs = env.first({"PBS_JOBID"}).has_value();
    if (slurm && pbs) {
      return Status::invalidArgument(
          "both SLURM_JOB_ID and PBS_JOBID are set: pass --scheduler slurm, --scheduler pbs or "
          "--scheduler none");
    }
    mode = slurm ? Mode::kSlurm : pbs ? Mode::kPbs : Mode::kNone;
  }
  if (mode == Mode::kNone) {
    return std::optional<Allocation>();
  }
  DTRUN_ASSIGN_OR_RETURN(auto found, mode == Mode::kSlurm ? detectSlurm(env) : detectPbs(env, job));
  return std::optional<Allocation>(std::move(found));
}

std::uint16_t jobPort(const Allocation& allocation) {
  const std::string_view id = allocation.jobId;
  const auto digits = id.find_first_not_of("0123456789");
  const std::string_view leading = id.substr(0, std::min(digits, std::size_t{9}));
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
  if (allocation.kind == Kind::kSlurm && allocation.inStep && digits != std::string_view::npos) {
    const std::string_view rest = id.substr(digits + 1, 9);
    std::from_chars(rest.data(), rest.data() + rest.size(), step);
  }
  constexpr std::uint64_t kBase = 20000;
  constexpr std::uint64_t kSpan = 10000;
  constexpr std::uint64_t kStepStride = 7919;  // spreads the steps of one job far apart
  return static_cast<std::uint16_t>(kBase + (job % kSpan + kStepStride * (step % kSpan)) % kSpan);
}

}  // namespace dtrun::scheduler
