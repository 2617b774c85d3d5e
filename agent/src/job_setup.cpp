#include "job_setup.h"

#include <unistd.h>

#include "log.h"

namespace dtrun::agent::detail {

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
    log::agent().info("port {} is taken on this host: joining the store there as a client",
                      config.storePort);
    return std::unique_ptr<rdzv::StoreServer>();
  }
  return Status::connection(
      "cannot start the store: " + store.status().message() +
      (config.storePort != 0 ? " (choose another --master_port, or omit it for a free port)" : ""));
}

Result<JobLink> connectJob(const AgentConfig& config, const MultiNodeConfig& multi,
                           const std::string& host, const rdzv::StoreServer* store) {
  JobLink link;
  if (store != nullptr) {
    DTRUN_ASSIGN_OR_RETURN(link.keepers,
                           rdzv::KeeperService::start(store->port(), config.storeToken));
  }
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
  rdzv::NodeRecord self;
  self.agentId = host + ":" + std::to_string(::getpid());
  self.host = host;
  self.nproc = config.nprocPerNode;
  self.nodeRankHint = multi.nodeRank;
  self.schedulerOrder = multi.schedulerOrder;
  self.storeHost = store != nullptr;
  link.client.host = store != nullptr ? "127.0.0.1" : config.masterAddr;
  link.client.port = store != nullptr ? store->port() : config.storePort;
  link.client.timeout = multi.readTimeout;
  link.client.token = config.storeToken;
  auto member = rdzv::RoundMember::connect(link.client, config.runId, settings, self);
  if (!member.isOk()) {
    return Status::connection("cannot reach the rendezvous store at " + config.masterAddr + ":" +
                              std::to_string(link.client.port) + ": " + member.status().message());
  }
  link.member = std::move(member).value();
  return link;
}

}  // namespace dtrun::agent::detail
