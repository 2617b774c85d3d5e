#include "live/live_view.h"

#include <algorithm>
#include <utility>

#include "live/metrics_text.h"
#include "progress_file.h"

namespace dtrun::agent::detail {
namespace {

constexpr std::chrono::seconds kSamplePeriod{1};

double secondsBetween(std::int64_t fromNs, std::int64_t toNs) {
  return static_cast<double>(toNs - fromNs) / 1e9;
}

}  // namespace

NodeStatus sampleNode(const WorkerGroup& group, RankSampler& sampler, std::int64_t nowNs) {
  NodeStatus node;
  for (const Worker& w : group.workers()) {
    RankStatus r;
    r.rank = w.rank;
    r.localRank = w.localRank;
    r.pid = w.child ? w.child->pid() : 0;
    if (w.status) {
      r.state = w.status->success() ? "succeeded" : "failed";
      r.exitCode = w.status->shellCode();
    } else {
      r.state = w.child ? "running" : "starting";
    }
    std::optional<std::uint64_t> ops;
    if (w.progress) {
      if (auto snapshot = w.progress->read()) {
        r.entryTimes = std::move(snapshot->entries);
        r.op = snapshot->op;
        r.ops = snapshot->ops;
        ops = snapshot->ops;
        if (snapshot->opStartNs != 0) {
          r.inOpSeconds = secondsBetween(snapshot->opStartNs, nowNs);
        }
        if (snapshot->changedNs != 0) {
          r.sinceProgressSeconds = secondsBetween(snapshot->changedNs, nowNs);
        }
      }
    }
    if (r.state == "running" && r.pid > 0) {
      const ProcessUse use = sampler.sample(r.pid, ops, nowNs);
      r.rssBytes = use.rssBytes;
      r.cpuPercent = use.cpuPercent;
      r.opsPerSecond = use.opsPerSecond;
    }
    node.ranks.push_back(std::move(r));
  }
  sampler.forgetUnseen();
  return node;
}

Result<std::unique_ptr<LiveView>> LiveView::start(
    boost::asio::io_context& io, const AgentConfig& config, std::string host,
    const WorkerGroup& group, std::function<LiveFacts()> facts,
    std::unique_ptr<LiveExchange> exchange, std::function<void(const Straggler&)> onStraggler) {
  std::unique_ptr<StatusServer> server;
  if (config.statusPort >= 0) {
    StatusServerOptions options;
    options.address = config.statusAddr;
    options.port = config.statusPort;
    options.token = config.storeToken;
    DTRUN_ASSIGN_OR_RETURN(server, StatusServer::start(options));
  }
  std::unique_ptr<LiveView> view(new LiveView(io, config, std::move(host), group, std::move(facts),
                                              std::move(server), std::move(exchange),
                                              std::move(onStraggler)));
  view->refresh();
  view->arm();
  return view;
}

LiveView::LiveView(boost::asio::io_context& io, const AgentConfig& config, std::string host,
                   const WorkerGroup& group, std::function<LiveFacts()> facts,
                   std::unique_ptr<StatusServer> server, std::unique_ptr<LiveExchange> exchange,
                   std::function<void(const Straggler&)> onStraggler)
    : config_(config),
      host_(std::move(host)),
      group_(group),
      facts_(std::move(facts)),
      server_(std::move(server)),
      exchange_(std::move(exchange)),
      onStraggler_(std::move(onStraggler)),
      gpus_(config.healthChecks.nvmlLibrary),
      timer_(io) {
  if (config.stragglerThreshold.count() > 0 && (!exchange_ || exchange_->gathers())) {
    stragglers_.emplace(config.stragglerThreshold, config.stragglerWindow);
  }
}

void LiveView::arm() {
  timer_.expires_after(kSamplePeriod);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) {
      refresh();
      gpus_.request(group_);  // once a period: the next refresh shows it
      arm();
    }
  });
}

void LiveView::refresh() {
  NodeStatus node = sampleNode(group_, sampler_, progress::monotonicNs());
  gpus_.fill(node);
  const LiveFacts facts = facts_();
  node.host = host_;
  node.runId = config_.runId;
  node.nodeRank = facts.nodeRank;
  node.nodeCount = facts.nodeCount;
  node.round = facts.round;
  node.attempt = facts.attempt;
  node.restarts = facts.restarts;
  node.maxRestarts = config_.maxRestarts;
  node.state = facts.state;
  node.uptimeSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (exchange_) {
    exchange_->exchange(node,
                        [this](std::vector<NodeStatus> others) { others_ = std::move(others); });
  }
  publish(node);
}

void LiveView::publish(const NodeStatus& mine) {
  std::vector<NodeStatus> nodes{mine};
  for (const NodeStatus& other : others_) {
    // A node of an older round may hold the rank this one has now.
    if (other.nodeRank != mine.nodeRank && other.round == mine.round) {
      nodes.push_back(other);
    }
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const NodeStatus& a, const NodeStatus& b) { return a.nodeRank < b.nodeRank; });
  if (stragglers_) {
    for (const Straggler& named : stragglers_->observe(nodes)) {
      onStraggler_(named);
    }
  }
  if (!server_) {
    return;
  }
  nlohmann::json job = {{"run_id", config_.runId}, {"nodes", nlohmann::json::array()}};
  for (NodeStatus& n : nodes) {
    for (RankStatus& r : n.ranks) {
      r.entryTimes.clear();  // the judgement's input, not the view's
    }
    job["nodes"].push_back(toJson(n));
  }
  server_->publish(job.dump(), metricsText(nodes));
}

}  // namespace dtrun::agent::detail
