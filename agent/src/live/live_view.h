// --status_port: every second, this node's ranks as the live view sees them (state, operation,
// progress, CPU, memory) are sampled on the agent's loop and published to the status endpoint,
// whose own thread answers clients. With --straggler_threshold, the agent that sees the whole job
// also judges its ranks' entry times (with or without an endpoint). Not thread-safe (the agent's
// loop only).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/agent_config.h"

#include "live/gpu_sampler.h"
#include "live/live_exchange.h"
#include "live/node_status.h"
#include "live/status_server.h"
#include "live/straggler_detector.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

// What the wiring knows of the job at a moment (the ranks come from the worker group).
struct LiveFacts {
  int nodeRank = 0;
  int nodeCount = 1;
  std::int64_t round = 0;
  int attempt = 0;
  int restarts = 0;
  std::string state;  // "rendezvous", "running", "restarting", "stopping", "finished"
};

// A node's ranks now: each worker's process, exit and progress file, and its use of the machine.
NodeStatus sampleNode(const WorkerGroup& group, RankSampler& sampler, std::int64_t nowNs);

class LiveView {
 public:
  // Listens on config.statusAddr:config.statusPort (the store token, if any, guards it; no
  // endpoint when the port is -1). `exchange` (multi-node; may be null): this node's status goes
  // to the job's store, and the gathering agent shows every node's. `onStraggler` gets each rank
  // the straggler judgement names (each once until it recovers).
  static Result<std::unique_ptr<LiveView>> start(boost::asio::io_context& io,
                                                 const AgentConfig& config, std::string host,
                                                 const WorkerGroup& group,
                                                 std::function<LiveFacts()> facts,
                                                 std::unique_ptr<LiveExchange> exchange,
                                                 std::function<void(const Straggler&)> onStraggler);
  // Whether `config` asks for the live view: an endpoint, or straggler detection.
  static bool wanted(const AgentConfig& config) {
    return config.statusPort >= 0 || config.stragglerThreshold.count() > 0;
  }
  LiveView(const LiveView&) = delete;
  LiveView& operator=(const LiveView&) = delete;
  LiveView(LiveView&&) = delete;
  LiveView& operator=(LiveView&&) = delete;
  ~LiveView() = default;

  [[nodiscard]] std::uint16_t port() const { return server_ ? server_->port() : 0; }
  // Samples and publishes now (the wiring calls it when the job's state changes).
  void refresh();
  // GET /stacks (stack_request.h): `handler` runs on the server's thread.
  void serveStacks(StatusServer::StacksHandler handler) {
    if (server_) {  // with --status_port only
      server_->serveStacks(std::move(handler));
    }
  }
  // The other nodes this agent saw alive lately (gathering; else none).
  [[nodiscard]] std::vector<int> otherNodes() const {
    std::vector<int> nodes;
    for (const NodeStatus& other : others_) {
      nodes.push_back(other.nodeRank);
    }
    return nodes;
  }

 private:
  LiveView(boost::asio::io_context& io, const AgentConfig& config, std::string host,
           const WorkerGroup& group, std::function<LiveFacts()> facts,
           std::unique_ptr<StatusServer> server, std::unique_ptr<LiveExchange> exchange,
           std::function<void(const Straggler&)> onStraggler);
  void arm();
  void publish(const NodeStatus& mine);

  const AgentConfig& config_;
  const std::string host_;
  const WorkerGroup& group_;  // the agent's, for every attempt
  std::function<LiveFacts()> facts_;
  std::unique_ptr<StatusServer> server_;  // null without --status_port
  std::unique_ptr<LiveExchange> exchange_;
  // The agent that sees the whole job (one node, or the gathering one) judges stragglers.
  std::optional<StragglerDetector> stragglers_;
  std::function<void(const Straggler&)> onStraggler_;
  std::vector<NodeStatus> others_;  // the other nodes, as last gathered
  RankSampler sampler_;
  GpuSampler gpus_;  // NVML, off the loop; each sample shows its last reading
  boost::asio::steady_timer timer_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace dtrun::agent::detail
