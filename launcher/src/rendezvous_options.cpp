#include "rendezvous_options.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <optional>

#include "etcd_options.h"
#include "text.h"
#include "value_parsers.h"

namespace dtrun::launcher {

namespace {

constexpr int kDefaultStaticPort = 29500;  // torchrun's --master_port default

}  // namespace

using text::isDigits;
using text::parseInt;
using text::trim;

// The store endpoint, run id and MASTER_ADDR, from the backend and its options.
Status resolveRendezvous(const Resolver& options, const HostFacts& host, bool standalone,
                         LaunchPlan& plan) {
  agent::AgentConfig& config = plan.config;
  const auto backend = options.get("rdzv_backend", "static");
  const auto endpoint = options.find("rdzv_endpoint");
  const auto localAddr = options.find("local_addr");
  const auto masterAddr = options.find("master_addr");
  const auto masterPort = options.find("master_port");
  const bool etcd = isEtcdBackend(backend.text);
  if (backend.text != "static" && backend.text != "c10d" && !etcd) {
    return expected(backend,
                    "static, c10d or etcd (etcd-v2 speaks etcd's old v2 API, which current etcd "
                    "no longer serves: --rdzv_backend=etcd speaks v3)");
  }
  std::optional<int> port;
  if (masterPort) {
    DTRUN_ASSIGN_OR_RETURN(auto parsed, parsePort(*masterPort));
    port = parsed;
  }
  std::optional<Endpoint> parsedEndpoint;
  if (endpoint && !trim(endpoint->text).empty() && !standalone && !etcd) {
    parsedEndpoint = parseEndpoint(endpoint->text);
    if (!parsedEndpoint) {
      return expected(*endpoint, "host[:port] or [ipv6]:port with a port from 0 to 65535");
    }
  }
  if (localAddr && trim(localAddr->text).empty()) {
    return expected(*localAddr, "a host name or address");
  }

  const auto runId = options.get("rdzv_id", "none");
  config.runId = runId.text;
  // The run id names the run's log directory (<log_dir>/<run id>) and its keys.
  if (config.runId.find('/') != std::string::npos || config.runId == "." || config.runId == "..") {
    return expected(runId, "an id without '/' (it names the run's log directory), e.g. job-42");
  }
  if (standalone) {
    if (options.find("rdzv_backend") || options.find("rdzv_endpoint") || options.find("rdzv_id")) {
      plan.warnings.emplace_back(
          "--standalone ignores --rdzv_backend, --rdzv_endpoint and --rdzv_id");
    }
    if (masterPort) {
      plan.warnings.push_back(
          "--standalone serves its store on a free port: " + masterPort->source + "=" +
          masterPort->text + " is ignored (leave out --standalone to use it)");
    }
    plan.rdzvBackend = "c10d";
    config.runId = host.makeRunId();
    config.masterAddr = localAddr ? localAddr->text : "127.0.0.1";
    config.storePort = 0;
    plan.rdzvEndpoint = "localhost:0";
  } else if (etcd) {
    // Every agent serves a workers' store (on --master_port, else a free port); the round's
    // node 0's is MASTER_ADDR:MASTER_PORT, reached at this address (--local_addr or the name).
    plan.rdzvBackend = "etcd";
    if (!endpoint || trim(endpoint->text).empty()) {
      return Status::invalidArgument(
          "--rdzv_endpoint: the etcd backend needs etcd's client URLs, e.g. "
          "--rdzv_endpoint=127.0.0.1:2379 (several joined by commas)");
    }
    config.masterAddr = localAddr ? localAddr->text : host.hostName;
    config.storePort = static_cast<std::uint16_t>(port.value_or(0));
    plan.rdzvEndpoint = std::string(trim(endpoint->text));
  } else if (backend.text == "static") {
    plan.rdzvBackend = "static";
    if (parsedEndpoint) {
      if (!parsedEndpoint->port) {
        return expected(*endpoint, "host:port (the static backend needs the port)");
      }
      config.masterAddr = parsedEndpoint->host;
      port = parsedEndpoint->port;
    } else if (masterAddr) {
      if (trim(masterAddr->text).empty()) {
        return expected(*masterAddr, "a host name or address");
      }
      config.masterAddr = std::string(trim(masterAddr->text));
    }
    config.storePort = static_cast<std::uint16_t>(port.value_or(0));
    plan.rdzvEndpoint = joinHostPort(config.masterAddr, config.storePort);
  } else {
    plan.rdzvBackend = "c10d";
    if (masterAddr || masterPort) {
      plan.warnings.emplace_back(
          "--master_addr and --master_port apply to the static backend only; ignored with c10d "
          "(use --rdzv_endpoint)");
    }
    const Endpoint where = parsedEndpoint.value_or(Endpoint{"localhost", std::nullopt});
    config.storePort = static_cast<std::uint16_t>(where.port.value_or(kDefaultC10dPort));
    config.masterAddr = localAddr ? localAddr->text : where.host;
    plan.rdzvEndpoint = joinHostPort(where.host, config.storePort);
  }
  config.storeListenHost = "";
  if (config.runId.empty()) {
    config.runId = host.makeRunId();
    plan.warnings.push_back("--rdzv_id is empty; using the random run id " + config.runId);
  }
  return Status::ok();
}

// Multi-node settings: who hosts the store, the node rank hint and the --rdzv_conf timeouts.
Result<agent::MultiNodeConfig> resolveMultiNode(const Resolver& options, const HostFacts& host,
                                                LaunchPlan& plan, int nodeRank) {
  agent::MultiNodeConfig multi;
  agent::AgentConfig& config = plan.config;
  multi.minNodes = plan.minNodes;
  multi.maxNodes = plan.maxNodes;
  const bool explicitRank = options.find("node_rank").has_value();
  if (plan.rdzvBackend == "static") {
    multi.nodeRank = nodeRank;
    multi.hostsStore = nodeRank == 0;
    multi.lastCallTimeout = std::chrono::milliseconds(0);  // every node is expected
    if (config.storePort == 0) {
      config.storePort = kDefaultStaticPort;
      plan.rdzvEndpoint = joinHostPort(config.masterAddr, config.storePort);
    }
  } else if (plan.rdzvBackend == "etcd") {
    multi.nodeRank = explicitRank ? nodeRank : -1;
    DTRUN_ASSIGN_OR_RETURN(multi.etcd,
                           resolveEtcd(plan.rdzvEndpoint, plan.rdzvConf, config.runId,
                                       options.env("DTRUN_ETCD_PASSWORD").value_or("")));
  } else {
    multi.nodeRank = explicitRank ? nodeRank : -1;
    const auto endpointHost = plan.rdzvEndpoint.substr(0, plan.rdzvEndpoint.rfind(':'));
    const std::string bare = endpointHost.starts_with('[') && endpointHost.ends_with(']')
                                 ? endpointHost.substr(1, endpointHost.size() - 2)
                                 : endpointHost;
    multi.hostsStore = host.isThisHost(bare);
    multi.hostGuessed = true;
    if (const auto localAddr = options.find("local_addr")) {
      multi.localAddr = std::string(trim(localAddr->text));
    }
    config.masterAddr = bare;  // every node reaches the store (and workers) there
  }
  for (const auto& [key, value] : plan.rdzvConf) {
    std::chrono::milliseconds* target = nullptr;
    if (key == "join_timeout" || key == "timeout") {
      target = &multi.joinTimeout;
    } else if (key == "last_call_timeout") {
      target = &multi.lastCallTimeout;
    } else if (key == "close_timeout") {
      target = &multi.closeTimeout;
    } else if (key == "keep_alive_interval") {
      target = &multi.keepAliveInterval;
    } else if (key == "read_timeout") {
      target = &multi.readTimeout;
    } else if (key == "keep_alive_max_attempt") {
      const auto n = isDigits(value) ? parseInt(value) : std::nullopt;
      if (!n || *n < 1 || *n > 1000) {
        return Status::invalidArgument(
            "--rdzv_conf: keep_alive_max_attempt expects a whole number from 1 to 1000, got '" +
            value + "'");
      }
      multi.keepAliveMaxAttempt = static_cast<int>(*n);
    } else if (key == "group_size") {
      const auto n = isDigits(value) ? parseInt(value) : std::nullopt;
      if (!n || *n > 65536) {
        return Status::invalidArgument(
            "--rdzv_conf: group_size expects a whole number of nodes per group, from 0 (no "
            "groups) to 65536, got '" +
            value + "'");
      }
      if (*n >= 2 && plan.rdzvBackend != "c10d") {
        return Status::invalidArgument("--rdzv_conf: group_size needs --rdzv_backend=c10d (" +
                                       plan.rdzvBackend + " joins every node at one place)");
      }
      multi.groupSize = static_cast<int>(*n);
    } else if (key == "is_host") {
      if (value != "1" && value != "0" && value != "true" && value != "false" && value != "True" &&
          value != "False") {
        return Status::invalidArgument("--rdzv_conf: is_host expects true or false, got '" + value +
                                       "'");
      }
      multi.hostsStore = value == "1" || value == "true" || value == "True";
      multi.hostGuessed = false;
    } else if (key == "heartbeat_timeout" || key == "use_agent_store" || key == "token" ||
               key == "token_file" || (multi.etcd && isEtcdConfKey(key))) {
      // torchrun's per-operation heartbeat deadline and store sharing: dtrun's heartbeats are
      // one-way messages and its agents always share their store. The token is
      // resolveStoreToken's, for one node as for many.
    } else {
      plan.warnings.push_back(
          "--rdzv_conf: unknown key '" + key +
          "' ignored (known: " + "join_timeout, last_call_timeout, close_timeout, " +
          "keep_alive_interval, keep_alive_max_attempt, read_timeout, is_host, group_size, token, "
          "token_file)");
    }
    if (target != nullptr) {
      DTRUN_ASSIGN_OR_RETURN(auto duration, confSeconds(key, value));
      *target = duration;
    }
  }
  if (multi.keepAliveInterval.count() <= 0 || multi.readTimeout.count() <= 0) {
    return Status::invalidArgument(
        "--rdzv_conf: keep_alive_interval and read_timeout must be above 0 seconds");
  }
  return multi;
}

Result<std::string> resolveStoreToken(
    const std::vector<std::pair<std::string, std::string>>& rdzvConf, const HostFacts& host) {
  std::string source;
  std::optional<std::string> token;
  std::optional<std::string> file;
  for (const auto& [key, value] : rdzvConf) {
    if (key == "token" && !token) {
      token = value;
      source = "--rdzv_conf token";
    } else if (key == "token_file" && !token && !file) {
      file = value;
      source = "--rdzv_conf token_file";
    }
  }
  if (!token && !file) {
    if (const auto it = host.env.find("DTRUN_STORE_TOKEN"); it != host.env.end()) {
      token = it->second;
      source = "DTRUN_STORE_TOKEN";
    } else if (const auto f = host.env.find("DTRUN_STORE_TOKEN_FILE"); f != host.env.end()) {
      file = f->second;
      source = "DTRUN_STORE_TOKEN_FILE";
    }
  }
  if (!token && file) {
    token = host.readFile(*file);
    if (!token) {
      return Status::invalidArgument(source + ": cannot read '" + *file +
                                     "' (give a readable file holding the store token)");
    }
    while (!token->empty() && (token->back() == '\n' || token->back() == '\r')) {
      token->pop_back();
    }
  }
  if (!token) {
    return std::string();
  }
  constexpr std::size_t kMaxToken = 4096;
  if (token->empty() || token->size() > kMaxToken ||
      std::any_of(token->begin(), token->end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; })) {
    return Status::invalidArgument(source +
                                   ": the store token must be 1 to 4096 characters "
                                   "without spaces or line breaks");
  }
  return *token;
}

}  // namespace dtrun::launcher
