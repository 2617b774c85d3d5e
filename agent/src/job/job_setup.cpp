#include "job/job_setup.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "dtrun/group_relay.h"

#include "log.h"
#include "tcp_probe.h"

namespace dtrun::agent::detail {

namespace {

// How long an agent whose c10d port is held, with nothing accepting there, keeps trying to serve
// the store: long enough for a passing connection to let go (its own port may be the one).
constexpr std::chrono::milliseconds kHeldPortWait{30000};
constexpr std::chrono::milliseconds kProbeWait{1000};

// c10d guessed this host for the store, and its port is taken: another agent or `dtrun store` on
// this host serves it (null: join as a client), unless nothing accepts there. Then a connection
// holds it as its own port (the kernel picks those from the range free ports come from), and no
// agent could join: keep trying to serve the store until the port is let go.
Result<std::unique_ptr<rdzv::StoreServer>> serveOrJoinTakenPort(const AgentConfig& config,
                                                                const rdzv::ServerOptions& options,
                                                                Status taken) {
  const auto wait = std::min(kHeldPortWait, config.multiNode->joinTimeout);
  const auto until = std::chrono::steady_clock::now() + wait;
  bool told = false;
  while (true) {
    if (acceptsConnection(config.masterAddr, config.storePort, kProbeWait).isOk()) {
      log::agent().info("port {} is taken on this host: joining the store there as a client",
                        config.storePort);
      return std::unique_ptr<rdzv::StoreServer>();
    }
    if (std::chrono::steady_clock::now() >= until) {
      return Status::connection(
          "cannot serve the store on port " + std::to_string(config.storePort) +
          " of this host: it is taken, yet nothing accepts connections there (" + taken.message() +
          "); choose another port in --rdzv_endpoint, or free this one");
    }
    if (!told) {
      log::agent().info(
          "port {} is held on this host but nothing accepts connections there: trying again "
          "to serve the store for up to {} s",
          config.storePort, std::chrono::duration_cast<std::chrono::seconds>(wait).count());
      told = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto store = rdzv::StoreServer::start(options);
    if (store.isOk()) {
      return std::move(store).value();
    }
    taken = store.status();
  }
}

}  // namespace

Result<std::unique_ptr<rdzv::StoreServer>> startAgentStore(const AgentConfig& config) {
  rdzv::ServerOptions options;
  options.host = config.storeListenHost;
  options.port = config.storePort;
  options.token = config.storeToken;
  auto store = rdzv::StoreServer::start(options);
  if (store.isOk()) {
    return std::move(store).value();
  }
  if (config.multiNode && config.multiNode->hostGuessed) {
    return serveOrJoinTakenPort(config, options, store.status());
  }
  return Status::connection(
      "cannot start the store: " + store.status().message() +
      (config.storePort != 0
           ? " (choose another port in " + config.storePortOption + ", or omit it for a free port)"
           : ""));
}

namespace {

// The end of the job: its store is about to go, so a short bound, not the read timeout.
constexpr std::chrono::milliseconds kReportTimeout{5000};

std::string joinText(const std::vector<std::string>& items, const char* separator) {
  std::string text;
  for (const auto& item : items) {
    text += (text.empty() ? "" : separator) + item;
  }
  return text;
}

rdzv::RoundSettings roundSettings(const AgentConfig& config, const MultiNodeConfig& multi) {
  rdzv::RoundSettings settings;
  settings.minNodes = multi.minNodes;
  settings.maxNodes = multi.maxNodes;
  settings.maxRestarts = config.maxRestarts;
  settings.maxNoProgress = config.maxNoProgressAttempts;
  settings.joinTimeout = multi.joinTimeout;
  settings.lastCallTimeout = multi.lastCallTimeout;
  settings.closeTimeout = multi.closeTimeout;
  settings.keepAliveInterval = multi.keepAliveInterval;
  settings.keepAliveMaxAttempt = multi.keepAliveMaxAttempt;
  return settings;
}

rdzv::EtcdOptions etcdOptions(const EtcdRendezvous& etcd, std::chrono::milliseconds timeout) {
  rdzv::EtcdOptions options;
  options.endpoints = etcd.endpoints;
  options.timeout = timeout;
  options.caFile = etcd.caFile;
  options.certFile = etcd.certFile;
  options.keyFile = etcd.keyFile;
  options.user = etcd.user;
  options.password = etcd.password;
  return options;
}

// How long one etcd member may hold one try of a notice (a heartbeat, "done"). The keeper calls a
// node dead after its dead-after time without one; a member that holds requests without refusing
// them (frozen, cut off, restarting) must not cost that much, nor may several in a row: a notice
// could take 6 s per silent member (the default try), and a killed leader's restarting member
// and a frozen follower in a row held a loaded agent's heartbeats for 10.4 s (the flake table).
// Half the dead-after time is left for the member that answers and the next heartbeat.
std::chrono::milliseconds noticeTryTimeout(const rdzv::RoundSettings& settings,
                                           std::size_t endpoints) {
  const auto share =
      settings.deadAfter() / static_cast<int>(2 * std::max<std::size_t>(1, endpoints));
  return std::max<std::chrono::milliseconds>(share, std::chrono::milliseconds(500));
}

// Joins through etcd: this agent's lease and candidacy first (the first agent to arrive runs
// the keeper), then its member, with the workers' store it serves in its record.
Result<JobLink> connectEtcdJob(const AgentConfig& config, const MultiNodeConfig& multi,
                               rdzv::NodeRecord self,
                               std::function<void(const Status&)> onLeaseLost) {
  const auto& etcd = *multi.etcd;
  auto client = rdzv::EtcdClient::connect(etcdOptions(etcd, multi.readTimeout));
  if (!client.isOk()) {
    return client.status();  // its message names the endpoints and what to fix
  }
  auto reportClient =
      rdzv::EtcdClient::connect(etcdOptions(etcd, std::min(multi.readTimeout, kReportTimeout)));
  if (!reportClient.isOk()) {
    return reportClient.status();
  }
  const auto settings = roundSettings(config, multi);
  auto noticeOptions = etcdOptions(etcd, multi.readTimeout);
  noticeOptions.tryTimeout = noticeTryTimeout(settings, etcd.endpoints.size());
  auto noticeClient = rdzv::EtcdClient::connect(noticeOptions);
  if (!noticeClient.isOk()) {
    return noticeClient.status();
  }
  JobLink link;
  DTRUN_ASSIGN_OR_RETURN(
      link.etcd, rdzv::EtcdPresence::start(std::move(client).value(), etcd.prefix, config.runId,
                                           self.agentId, etcd.leaseTtl, std::move(onLeaseLost)));
  link.stores = link.etcd->stores();
  link.reportStores = [c = std::shared_ptr<rdzv::EtcdClient>(std::move(reportClient).value()),
                       prefix = etcd.prefix] { return rdzv::makeEtcdStore(c, prefix); };
  auto member = rdzv::RoundMember::connect(
      link.stores, link.etcd->storesThrough(std::move(noticeClient).value()), config.runId,
      settings, std::move(self), false);
  if (!member.isOk()) {
    return Status::error(
        member.status().code() == Errc::kDenied ? Errc::kDenied : Errc::kConnection,
        "cannot join job '" + config.runId + "' through etcd at " + joinText(etcd.endpoints, ",") +
            ": " + member.status().message());
  }
  link.member = std::move(member).value();
  return link;
}

// An agent that does not host the job's store serves its workers one of its own (on a free
// port): that store may be a `dtrun store` shared by other jobs, whose workers' keys (torch's
// /worker/attempt_N/...) carry no run id. The keeper gives a round without the store's host
// node 0's workers' store, as torchrun gives its workers the rank-0 agent's second store.
Result<std::unique_ptr<rdzv::StoreServer>> startWorkersStore(const AgentConfig& config) {
  rdzv::ServerOptions options;
  options.host = config.storeListenHost;
  options.token = config.storeToken;
  auto store = rdzv::StoreServer::start(options);
  if (!store.isOk()) {
    return Status::connection("cannot start this node's workers' store: " +
                              store.status().message());
  }
  return std::move(store).value();
}

}  // namespace

Result<JobLink> connectJob(const AgentConfig& config, const MultiNodeConfig& multi,
                           const std::string& host, const rdzv::StoreServer* store,
                           std::function<void(const Status&)> onLeaseLost) {
  rdzv::NodeRecord self;
  self.agentId = host + ":" + std::to_string(::getpid());
  self.host = host;
  self.nproc = config.nprocPerNode;
  self.nodeRankHint = multi.nodeRank;
  self.schedulerOrder = multi.schedulerOrder;
  if (multi.etcd) {
    // Other nodes' workers reach this node's store at its --local_addr (or its name).
    self.host = config.masterAddr;
    self.workerStorePort = store != nullptr ? store->port() : 0;
    return connectEtcdJob(config, multi, std::move(self), std::move(onLeaseLost));
  }
  JobLink link;
  if (store != nullptr) {
    DTRUN_ASSIGN_OR_RETURN(link.keepers,
                           rdzv::KeeperService::start(store->port(), config.storeToken));
  }
  self.storeHost = store != nullptr;
  rdzv::ClientOptions client;
  client.host = store != nullptr ? "127.0.0.1" : config.masterAddr;
  client.port = store != nullptr ? store->port() : config.storePort;
  client.timeout = multi.readTimeout;
  client.token = config.storeToken;
  link.stores = rdzv::storeFactory(client);
  client.timeout = std::min(client.timeout, kReportTimeout);
  link.reportStores = rdzv::storeFactory(client);
  if (store == nullptr) {  // the job's store may be a shared one: see startWorkersStore
    DTRUN_ASSIGN_OR_RETURN(link.workersStore, startWorkersStore(config));
    self.host = multi.localAddr.empty() ? host : multi.localAddr;
    self.workerStorePort = link.workersStore->port();
  }
  rdzv::GroupOptions group;
  group.size = multi.groupSize;
  group.listenHost = config.storeListenHost;
  group.advertiseHost = self.host;
  client.timeout = multi.readTimeout;
  auto member = rdzv::connectGroupMember(client, config.runId, roundSettings(config, multi),
                                         std::move(self), group);
  if (!member.isOk()) {
    const std::string where = config.masterAddr + ":" + std::to_string(client.port);
    if (member.status().code() == Errc::kDenied) {  // a setting to fix (a token, a used run id)
      return Status::error(Errc::kDenied,
                           "the rendezvous store at " + where + ": " + member.status().message());
    }
    return Status::connection("cannot reach the rendezvous store at " + where + ": " +
                              member.status().message());
  }
  link.member = std::move(member).value();
  return link;
}

Status clearWorkerStore(std::uint16_t port, const std::string& token) {
  rdzv::ClientOptions options;
  options.port = port;
  options.token = token;
  options.timeout = kReportTimeout;
  DTRUN_ASSIGN_OR_RETURN(auto store, rdzv::connectStore(options));
  DTRUN_ASSIGN_OR_RETURN(auto keys, store->listKeys());
  for (const auto& key : keys) {
    DTRUN_TRY(store->deleteKey(key).status());
  }
  return Status::ok();
}

}  // namespace dtrun::agent::detail
