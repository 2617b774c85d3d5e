#include "ssh_plan.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>

#include "launch_plan.h"
#include "option_table.h"
#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {
namespace {

constexpr int kPortBase = 20000;
constexpr int kPortSpan = 10000;

// Read by the launch over ssh only, never passed on.
constexpr std::array<std::string_view, 8> kSshOnly = {"hostfile",     "hosts",     "include",
                                                      "exclude",      "export",    "remote_workdir",
                                                      "remote_dtrun", "ssh_config"};

// Set per host by the launch over ssh: given on the command line, each is refused with why.
struct PerHost {
  std::string_view dest;
  std::string_view why;
};
constexpr std::array<PerHost, 6> kPerHost = {{
    {"node_rank", "each host's node rank is its position in the host list"},
    {"master_addr", "the store is on the first host (name another with --rdzv_endpoint)"},
    {"master_port", "the store's port comes from --rdzv_endpoint, or from the run id"},
    {"standalone", "a job over several hosts is not standalone"},
    {"local_addr", "each host advertises its own name"},
    {"scheduler", "hosts started over ssh have no batch scheduler"},
}};

// The environment every remote agent gets from this shell when set here (PATH is not among
// them: each host keeps its own); --export adds more.
constexpr std::array<std::string_view, 10> kExportedNames = {
    "PYTHONPATH",       "PYTHON_EXEC",       "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",      "OMP_NUM_THREADS",   "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
    "DTRUN_LOG_LEVEL",  "DTRUN_PYTHON_HOOK", "DTRUN_STORE_TOKEN_FILE",
    "CUDA_DEVICE_ORDER"};
constexpr std::array<std::string_view, 4> kExportedPrefixes = {"PET_", "NCCL_", "GLOO_", "TORCH_"};

std::optional<std::string> givenText(const RawOptions& raw, std::string_view dest) {
  if (const auto it = raw.given.find(dest); it != raw.given.end()) {
    return it->second;
  }
  return std::nullopt;
}

bool isVariableName(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name.front())) != 0) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

Result<std::vector<HostEntry>> readHosts(const RawOptions& raw, const HostFacts& host) {
  const auto hostfile = givenText(raw, "hostfile");
  const auto hosts = givenText(raw, "hosts");
  if (hostfile && hosts) {
    return Status::invalidArgument(
        "--hostfile and --hosts cannot be used together (list the hosts in one of them)");
  }
  std::vector<HostEntry> entries;
  if (hostfile) {
    const auto text = host.readFile(*hostfile);
    if (!text) {
      return Status::invalidArgument("--hostfile: cannot read '" + *hostfile +
                                     "' (give a readable file, one host per line: 'node1 "
                                     "slots=4')");
    }
    DTRUN_ASSIGN_OR_RETURN(entries, parseHostfile(*text, *hostfile));
  } else {
    DTRUN_ASSIGN_OR_RETURN(entries, parseHostList(hosts.value_or("")));
  }
  return selectHosts(std::move(entries), givenText(raw, "include"), givenText(raw, "exclude"));
}

// The remote agents' environment: the default set and prefixes as set here, then --export's.
Result<std::map<std::string, std::string>> exportedEnvironment(const RawOptions& raw,
                                                               const HostFacts& host) {
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : host.env) {
    const bool named =
        std::find(kExportedNames.begin(), kExportedNames.end(), name) != kExportedNames.end();
    const bool prefixed =
        std::any_of(kExportedPrefixes.begin(), kExportedPrefixes.end(),
                    [&key = name](std::string_view prefix) { return key.starts_with(prefix); });
    if (named || prefixed) {
      env[name] = value;
    }
  }
  const auto list = givenText(raw, "export");
  if (!list) {
    return env;
  }
  // Several --export options arrive joined by newlines.
  std::string joined = *list;
  std::replace(joined.begin(), joined.end(), '\n', ',');
  for (const std::string_view piece : text::split(joined, ',')) {
    const std::string_view item = text::trim(piece);
    const auto equals = item.find('=');
    const std::string name(item.substr(0, equals));
    if (!isVariableName(name)) {
      return Status::invalidArgument("--export: '" + std::string(item) +
                                     "' is not VAR or VAR=value (write --export=VAR1,VAR2)");
    }
    if (equals != std::string_view::npos) {
      env[name] = std::string(item.substr(equals + 1));
    } else if (const auto it = host.env.find(name); it != host.env.end()) {
      env[name] = it->second;
    } else {
      return Status::invalidArgument(std::string("--export: ")
                                         .append(name)
                                         .append(" is not set here (set it, or give its value: "
                                                 "--export=")
                                         .append(name)
                                         .append("=value)"));
    }
  }
  return env;
}

struct Rendezvous {
  std::string endpoint;       // host:port
  std::optional<int> server;  // the index of the host that serves the store, if one of them does
};

Result<Rendezvous> rendezvousOf(const RawOptions& raw, const std::vector<HostEntry>& hosts,
                                const std::string& rdzvId) {
  Rendezvous result;
  std::string host;
  int port = 0;
  if (const auto given = givenText(raw, "rdzv_endpoint")) {
    const auto parsed = parseEndpoint(*given);
    if (!parsed || parsed->host.empty()) {
      return Status::invalidArgument("--rdzv_endpoint: expected host[:port] or [ipv6]:port, got '" +
                                     *given + "'");
    }
    host = parsed->host;
    port = parsed->port.value_or(kDefaultC10dPort);
  } else {
    host = hostAddress(hosts.front().name);
    port = rdzvPortFor(rdzvId);
  }
  const std::string bare = host.starts_with('[') && host.ends_with(']') && host.size() > 2
                               ? host.substr(1, host.size() - 2)
                               : host;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (hostAddress(hosts[i].name) == host || hostAddress(hosts[i].name) == bare) {
      result.server = static_cast<int>(i);
      break;
    }
  }
  result.endpoint = joinHostPort(bare, port);
  return result;
}

// The command line's own options, as the remote dtrun takes them, minus what this launch sets.
std::vector<std::string> passedThrough(const RawOptions& raw) {
  std::vector<std::string> flags;
  for (const auto& [dest, value] : raw.given) {
    const bool ours = std::find(kSshOnly.begin(), kSshOnly.end(), dest) != kSshOnly.end() ||
                      dest == kWatchStdinDest || dest == "nnodes" || dest == "rdzv_backend" ||
                      dest == "rdzv_endpoint" || dest == "rdzv_id" || dest == "rdzv_conf" ||
                      dest == "dry_run" || dest == "report";
    if (ours) {
      continue;
    }
    const OptionSpec* spec = findSpec(dest);
    if (spec != nullptr && spec->kind == Kind::kFlag) {
      flags.push_back("--" + dest);
    } else {
      flags.push_back(std::string("--").append(dest).append("=").append(value));
    }
  }
  return flags;
}

std::string shellJoined(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) {
    line += (line.empty() ? "" : " ") + shellQuote(word);
  }
  return line;
}

}  // namespace

bool wantsSsh(const RawOptions& raw) {
  return raw.given.contains("hostfile") || raw.given.contains("hosts");
}

Status checkNoSshOptions(const RawOptions& raw) {
  for (const std::string_view dest : kSshOnly) {
    if (raw.given.contains(dest)) {
      return Status::invalidArgument(flagName(dest) +
                                     " applies to a launch over ssh only: add --hostfile=FILE "
                                     "or --hosts=a,b,c");
    }
  }
  return Status::ok();
}

int rdzvPortFor(std::string_view rdzvId) {
  std::uint32_t hash = 2166136261U;  // FNV-1a
  for (const char c : rdzvId) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 16777619U;
  }
  return kPortBase + static_cast<int>(hash % kPortSpan);
}

std::string shellQuote(std::string_view word) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::string_view("_-./:=,@%+").find(c) != std::string_view::npos;
  });
  if (plain) {
    return std::string(word);
  }
  std::string quoted = "'";
  for (const char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

Result<SshPlan> planSsh(const RawOptions& raw, const HostFacts& host, const SshFacts& ssh) {
  for (const PerHost& perHost : kPerHost) {
    if (raw.given.contains(perHost.dest)) {
      return Status::invalidArgument(flagName(perHost.dest) + " cannot be given with --hostfile " +
                                     "or --hosts: " + std::string(perHost.why));
    }
  }
  if (const auto backend = givenText(raw, "rdzv_backend"); backend && *backend != "c10d") {
    return Status::invalidArgument(
        "--rdzv_backend: hosts started over ssh meet through c10d (leave it out), got '" +
        *backend + "'");
  }
  DTRUN_ASSIGN_OR_RETURN(const auto hosts, readHosts(raw, host));
  const int count = static_cast<int>(hosts.size());
  if (const auto nnodes = givenText(raw, "nnodes")) {
    DTRUN_ASSIGN_OR_RETURN(const auto range, parseNnodes(Setting{*nnodes, "--nnodes"}));
    if (range.first != count || range.second != count) {
      return Status::invalidArgument("--nnodes=" + *nnodes + " disagrees with the " +
                                     std::to_string(count) +
                                     " hosts to run on (leave --nnodes out: it is the host count)");
    }
  }
  const auto userConf = givenText(raw, "rdzv_conf").value_or("");
  DTRUN_ASSIGN_OR_RETURN(const auto conf, parseRdzvConf(Setting{userConf, "--rdzv_conf"}));
  if (std::any_of(conf.begin(), conf.end(), [](const auto& kv) { return kv.first == "is_host"; })) {
    return Status::invalidArgument(
        "--rdzv_conf: is_host is set per host by --hostfile/--hosts (the store's host only); "
        "leave it out");
  }
  if (ssh.sshProgram.empty()) {
    return Status::invalidArgument(
        "--hostfile/--hosts: no ssh on PATH (install the OpenSSH client: apt-get install "
        "openssh-client)");
  }

  SshPlan plan;
  plan.rdzvId = givenText(raw, "rdzv_id").value_or("");
  if (plan.rdzvId.empty()) {
    plan.rdzvId = host.makeRunId();
  }
  DTRUN_ASSIGN_OR_RETURN(const auto rendezvous, rendezvousOf(raw, hosts, plan.rdzvId));
  plan.rdzvEndpoint = rendezvous.endpoint;
  DTRUN_ASSIGN_OR_RETURN(const auto env, exportedEnvironment(raw, host));
  const std::string workdir = givenText(raw, "remote_workdir").value_or(ssh.cwd);
  const std::string dtrun = givenText(raw, "remote_dtrun").value_or(ssh.selfExe);
  if (workdir.empty() || dtrun.empty()) {
    return Status::invalidArgument(
        std::string(workdir.empty() ? "--remote_workdir" : "--remote_dtrun") +
        ": expected a path on every host");
  }
  std::vector<std::string> program = raw.program;
  if (!program.empty() && program.front() == "--") {
    program.erase(program.begin());
  }
  const bool nprocGiven =
      raw.given.contains("nproc_per_node") || host.env.contains("PET_NPROC_PER_NODE");
  const std::vector<std::string> common = passedThrough(raw);

  std::vector<std::string> sshArgv = {ssh.sshProgram, "-T",
                                      "-o",           "BatchMode=yes",
                                      "-o",           "ConnectTimeout=10",
                                      "-o",           "ServerAliveInterval=5",
                                      "-o",           "ServerAliveCountMax=3"};
  if (const auto config = givenText(raw, "ssh_config")) {
    sshArgv.insert(sshArgv.end(), {"-F", *config});
  }

  for (int i = 0; i < count; ++i) {
    const HostEntry& entry = hosts[static_cast<std::size_t>(i)];
    std::vector<std::string> words = {dtrun,
                                      "--" + std::string(kWatchStdinDest),
                                      "--nnodes=" + std::to_string(count),
                                      "--node_rank=" + std::to_string(i),
                                      "--rdzv_backend=c10d",
                                      "--rdzv_endpoint=" + plan.rdzvEndpoint,
                                      "--rdzv_id=" + plan.rdzvId,
                                      "--scheduler=none"};
    std::string nodeConf = userConf;
    if (rendezvous.server) {
      nodeConf += std::string(nodeConf.empty() ? "" : ",") +
                  "is_host=" + (*rendezvous.server == i ? "true" : "false");
    }
    if (!nodeConf.empty()) {
      words.push_back("--rdzv_conf=" + nodeConf);
    }
    // One --report for the job: the node that hosts the store gathers every node's record
    // (node 0 when the store is elsewhere), so a shared path is not written by every host.
    if (const auto report = givenText(raw, "report");
        report && i == (rendezvous.server ? *rendezvous.server : 0)) {
      words.push_back("--report=" + *report);
    }
    if (entry.slots && !nprocGiven) {
      words.push_back("--nproc_per_node=" + std::to_string(*entry.slots));
    }
    words.insert(words.end(), common.begin(), common.end());
    words.emplace_back("--");
    words.insert(words.end(), program.begin(), program.end());

    std::vector<std::string> prefix = {"cd", "--", workdir, "&&", "exec"};
    std::string command;
    for (const std::string& word : prefix) {
      command += (command.empty() ? "" : " ") + (word == "&&" ? word : shellQuote(word));
    }
    if (!env.empty()) {
      command += " env";
      for (const auto& [name, value] : env) {
        command += " " + shellQuote(std::string(name).append("=").append(value));
      }
    }
    command += " " + shellJoined(words);

    SshNode node;
    node.host = entry.name;
    node.nodeRank = i;
    node.remoteCommand = command;
    node.argv = sshArgv;
    node.argv.insert(node.argv.end(), {"--", entry.name, command});
    plan.nodes.push_back(std::move(node));
  }

  // Node 0's options checked here as its dtrun will check them, so that a bad flag is one line
  // before any connection. The program is taken as found: it is looked up on each host.
  RawOptions first;
  first.given = raw.given;
  std::erase_if(first.given, [](const auto& kv) {
    return std::find(kSshOnly.begin(), kSshOnly.end(), kv.first) != kSshOnly.end();
  });
  first.given["nnodes"] = std::to_string(count);
  first.given["node_rank"] = "0";
  first.given["rdzv_backend"] = "c10d";
  first.given["rdzv_endpoint"] = plan.rdzvEndpoint;
  first.given["rdzv_id"] = plan.rdzvId;
  first.given["scheduler"] = "none";
  if (hosts.front().slots && !nprocGiven) {
    first.given["nproc_per_node"] = std::to_string(*hosts.front().slots);
  }
  first.program = program;
  HostFacts anyHost = host;
  anyHost.gpuCount = std::max(host.gpuCount, 1);  // "gpu" is judged on each host
  anyHost.findExecutable = [](const std::string& entry) { return std::optional(entry); };
  anyHost.resolveProgram = [](const std::string& name) { return std::optional(name); };
  anyHost.whyNotRunnable = [](const std::string&) { return std::string(); };
  anyHost.fileExists = [](const std::string&) { return true; };
  anyHost.isThisHost = [](const std::string&) { return false; };
  DTRUN_ASSIGN_OR_RETURN(const LaunchPlan checked, validate(first, anyHost));
  plan.shutdownTimeout = checked.config.shutdownTimeout;
  plan.dryRun = raw.given.contains("dry_run");
  return plan;
}

std::string sshPlanText(const SshPlan& plan) {
  std::string text = "dtrun: " + std::to_string(plan.nodes.size()) + " hosts over ssh, rdzv_id " +
                     plan.rdzvId + ", c10d store at " + plan.rdzvEndpoint + "\n";
  for (const SshNode& node : plan.nodes) {
    text += "  node " + std::to_string(node.nodeRank) + " on " + node.host + ":\n    " +
            shellJoined(node.argv) + "\n";
  }
  return text;
}

}  // namespace dtrun::launcher
