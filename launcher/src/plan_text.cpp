#include "plan_text.h"

#include <algorithm>
#include <csignal>
#include <iomanip>
#include <set>
#include <sstream>
#include <string_view>

#include "dtrun/placement.h"

namespace dtrun::launcher {
namespace {

std::string streamsText(const agent::StreamSelection& selection) {
  if (selection.perRank.empty()) {
    return std::to_string(static_cast<int>(selection.all));
  }
  std::string text;
  for (const auto& [rank, streams] : selection.perRank) {
    text += (text.empty() ? "" : ",") + std::to_string(rank) + ":" +
            std::to_string(static_cast<int>(streams));
  }
  return text;
}

std::string quoteCommand(const std::vector<std::string>& command) {
  std::string text;
  for (const std::string& word : command) {
    const bool plain = !word.empty() && word.find_first_of(" \t\n'\"\\$") == std::string::npos;
    text += (text.empty() ? "" : " ") + (plain ? word : "'" + word + "'");
  }
  return text;
}

}  // namespace

std::string formatSeconds(double seconds) {
  std::ostringstream out;
  out << seconds;
  return out.str();
}

std::string launchBanner(const LaunchPlan& plan) {
  const agent::AgentConfig& config = plan.config;
  std::string conf;
  for (const auto& [key, value] : plan.rdzvConf) {
    conf.append(conf.empty() ? "" : ", ").append(key).append(": ").append(value);
  }
  std::string text = "Starting dtrun with launch configs:";
  const auto row = [&text](std::string_view name, const std::string& value) {
    text += "\n  ";
    text += name;
    text.append(20 - std::min<std::size_t>(name.size(), 19), ' ');
    text += ": " + value;
  };
  row("entrypoint", config.entrypointName);
  row("command", quoteCommand(config.command));
  row("min_nodes", std::to_string(plan.minNodes));
  row("max_nodes", std::to_string(plan.maxNodes));
  row("nproc_per_node", std::to_string(config.nprocPerNode));
  row("run_id", config.runId);
  row("rdzv_backend", plan.rdzvBackend);
  row("rdzv_endpoint", plan.rdzvEndpoint + (config.storePort == 0 ? " (a free port)" : ""));
  row("rdzv_configs", "{" + conf + "}");
  row("master_addr", config.masterAddr);
  row("scheduler", plan.scheduler);
  row("max_restarts", std::to_string(config.maxRestarts));
  row("monitor_interval", formatSeconds(plan.monitorInterval) + " (unused: dtrun does not poll)");
  row("role", config.role);
  row("log_dir", config.logDir.empty() ? "(a new directory under $TMPDIR)" : config.logDir);
  row("redirects", streamsText(config.redirects));
  row("tee", streamsText(config.tee));
  row("signals_to_handle", config.signalsToHandleText);
  std::string forwarded;
  for (const int sig : config.signalsToForward) {
    forwarded +=
        (forwarded.empty() ? "" : ",") + std::string(sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2");
  }
  row("signals_forwarded",
      forwarded.empty() ? "(none)"
                        : forwarded + " (to every worker; the job goes on if they handle them)");
  row("shutdown_timeout",
      formatSeconds(static_cast<double>(config.shutdownTimeout.count()) / 1000) + " s");
  row("hang_timeout",
      config.hangTimeout.count() == 0
          ? std::string("0 (off)")
          : formatSeconds(static_cast<double>(config.hangTimeout.count()) / 1000) + " s");
  row("report", config.reportFile.empty() ? "(none)" : config.reportFile);
  row("placement", plan.placement.empty() ? "(none)" : plan.placement);
  for (std::size_t local = 0; local < plan.placementByRank.size(); ++local) {
    row("  local rank " + std::to_string(local), plan.placementByRank[local]);
  }
  return text;
}

std::string launchSummary(const LaunchPlan& plan) {
  const agent::AgentConfig& config = plan.config;
  const std::string workers =
      std::to_string(config.nprocPerNode) + (config.nprocPerNode == 1 ? " worker" : " workers");
  std::string nodes = std::to_string(plan.minNodes);
  if (plan.maxNodes != plan.minNodes) {
    nodes += "-" + std::to_string(plan.maxNodes);
  }
  nodes += plan.maxNodes == 1 ? " node" : " nodes";
  std::string text = "dtrun: " + config.entrypointName + ", " + workers + " per node, " + nodes +
                     ", run " + config.runId;
  // plan.scheduler reads "none (...)" when no batch scheduler or MPI launcher was found.
  if (!plan.scheduler.starts_with("none")) {
    text += "; scheduler: " + plan.scheduler;
  }
  if (!config.logDir.empty()) {
    text += "; logs in " + (config.discardsLogs() ? std::string("(none)") : config.logDir);
  }
  return text + " (--verbose: the launch configs)";
}

std::string dryRunText(const LaunchPlan& plan, const std::vector<std::string>& inherited) {
  const agent::AgentConfig& config = plan.config;
  const auto& multi = config.multiNode;
  // Node ranks of a c10d job are assigned at rendezvous; the table shows the node this agent
  // asks to be (its --node_rank, else 0) in a job of max_nodes nodes with equal nproc_per_node.
  const int nodeCount = plan.maxNodes;
  const int nodeRank = multi && multi->nodeRank >= 0 ? multi->nodeRank : 0;
  const bool assignedLater = multi && (plan.rdzvBackend == "c10d" || multi->nodeRank < 0);
  const std::string logBase =
      config.discardsLogs()
          ? std::string("(none: --log_dir=/dev/null)")
          : (config.logDir.empty() ? std::string("$TMPDIR/dtrun-XXXXXX") : config.logDir) + "/" +
                config.runId + "/attempt_0";
  std::ostringstream out;
  out << "dtrun --dry-run: nothing is started.\n" << launchBanner(plan) << "\n";
  if (multi) {
    out << "  " << std::left << std::setw(20) << "node_rank"
        << ": " << nodeRank
        << (assignedLater ? " (assigned at rendezvous; shown as if this node got it)" : "") << "\n"
        << "  " << std::setw(20) << "hosts_store"
        << ": " << (multi->hostsStore ? "yes" : "no") << "\n";
  }
  // With a placement, the table gains its columns: what each rank uses and is bound to.
  const bool placed = !config.placement.empty();
  const auto placementOf = [&config](int local) {
    return config.placement[static_cast<std::size_t>(local)];
  };
  std::size_t cpuWidth = 5;
  for (int local = 0; placed && local < config.nprocPerNode; ++local) {
    cpuWidth = std::max(cpuWidth, placement::formatCpuList(placementOf(local).cpus).size() + 2);
  }
  out << "\nRank table (node " << nodeRank << " of " << nodeCount << ", world size "
      << nodeCount * config.nprocPerNode << "):\n"
      << "  rank  local_rank  node_rank  ";
  if (placed) {
    out << std::left << std::setw(8) << "gpu" << std::setw(static_cast<int>(cpuWidth)) << "cpus"
        << std::setw(6) << "numa";
  }
  out << "log_dir\n";
  const int offset = nodeRank * config.nprocPerNode;
  for (int local = 0; local < config.nprocPerNode; ++local) {
    out << "  " << std::left << std::setw(6) << offset + local << std::setw(12) << local
        << std::setw(11) << nodeRank;
    if (placed) {
      const auto& p = placementOf(local);
      const auto orDash = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
      out << std::setw(8) << orDash(p.gpus) << std::setw(static_cast<int>(cpuWidth))
          << orDash(placement::formatCpuList(p.cpus)) << std::setw(6)
          << orDash(placement::formatCpuList(p.memNodes));
    }
    out << logBase << (config.discardsLogs() ? "" : "/" + std::to_string(local)) << "\n";
  }
  std::set<std::string> inheritedEntries(inherited.begin(), inherited.end());
  for (int local = 0; local < config.nprocPerNode; ++local) {
    out << "\nWorker " << offset + local << " (local rank " << local
        << "): " << quoteCommand(config.command) << "\n"
        << "  environment set by dtrun (the rest is inherited):\n";
    for (std::string entry :
         agent::plannedWorkerEnvironment(config, inherited, nodeRank, nodeCount, local,
                                         logBase + "/" + std::to_string(local))) {
      if (inheritedEntries.count(entry) != 0) {
        continue;
      }
      const bool portEntry = entry == "MASTER_PORT=0" ||
                             (entry.starts_with("DTRUN_STORE_ADDR=") && entry.ends_with(":0"));
      if (config.storePort == 0 && portEntry) {  // the store picks its port when it starts
        entry.replace(entry.size() - 1, 1, "<free port>");
      }
      out << "    " << entry << "\n";
    }
  }
  return out.str();
}
}  // namespace dtrun::launcher
