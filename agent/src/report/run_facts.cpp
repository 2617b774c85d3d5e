#include "report/run_facts.h"

#include <chrono>
#include <fstream>

#include <sys/utsname.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "iso_time.h"
#include "log.h"
#include "text.h"

namespace dtrun::agent::detail {
namespace {

namespace fs = std::filesystem;

nlohmann::json kernel() {
  struct utsname names {};
  if (::uname(&names) != 0) {
    return nullptr;
  }
  return std::string(names.sysname) + " " + names.release + " " + names.version + " " +
         names.machine;
}

nlohmann::json redacted(const std::vector<std::string>& words) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& w : words) {
    out.push_back(text::redactSecrets(w));
  }
  return out;
}

nlohmann::json rendezvous(const AgentConfig& config) {
  nlohmann::json r;
  if (!config.multiNode) {
    r["backend"] = "single node (its own store)";
    return r;
  }
  const MultiNodeConfig& m = *config.multiNode;
  r["nodes"] = {{"min", m.minNodes}, {"max", m.maxNodes}};
  r["node_rank"] = m.nodeRank;
  r["hosts_store"] = m.hostsStore;
  if (m.etcd) {
    r["backend"] = "etcd";
    r["endpoints"] = m.etcd->endpoints;
    r["prefix"] = m.etcd->prefix;
    r["tls"] = !m.etcd->caFile.empty();
    r["user"] = m.etcd->user;  // the password never: it is a secret
  } else {
    r["backend"] = "store";
    r["store"] = config.masterAddr + ":" + std::to_string(config.storePort);
  }
  return r;
}

// run.json's text.
std::string runFactsJson(const AgentConfig& config, const std::string& host) {
  nlohmann::json facts;
  facts["dtrun_version"] = config.dtrunVersion;
  facts["command_line"] = redacted(config.commandLine);
  facts["host"] = host;
  facts["kernel"] = kernel();
  facts["pid"] = ::getpid();
  facts["started"] = isoTime(std::chrono::system_clock::now());
  facts["run_id"] = config.runId;
  facts["entrypoint"] = config.entrypointName;
  facts["worker_command"] = redacted(config.command);
  facts["nproc_per_node"] = config.nprocPerNode;
  facts["max_restarts"] = config.maxRestarts;
  facts["rendezvous"] = rendezvous(config);
  facts["store_token"] = config.storeToken.empty() ? "none" : "set (not recorded)";
  facts["report_file"] = config.reportFile;
  facts["event_log_file"] = config.eventLogFile;
  facts["hang_timeout_seconds"] = std::chrono::duration<double>(config.hangTimeout).count();
  nlohmann::json placement = nlohmann::json::array();
  for (std::size_t i = 0; i < config.placement.size(); ++i) {
    const LocalPlacement& p = config.placement[i];
    placement.push_back(
        {{"local_rank", i}, {"cpus", p.cpus}, {"mem_nodes", p.memNodes}, {"gpus", p.gpus}});
  }
  facts["placement"] = placement;
  // An argument need not be UTF-8 (a Latin-1 file name): replaced, never a throw.
  return facts.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

void writeRunFacts(const fs::path& runDir, const AgentConfig& config, const std::string& host) {
  if (runDir.empty()) {
    return;  // --log_dir=/dev/null: no directory
  }
  std::ofstream out(runDir / "run.json", std::ios::trunc);
  out << runFactsJson(config, host);
  out.close();
  if (!out) {
    log::agent().warn("cannot write {}: `dtrun bundle` will lack the run's record",
                      (runDir / "run.json").string());
  }
}

}  // namespace dtrun::agent::detail
