#include "live/stack_request.h"

#include <set>
#include <thread>

#include <boost/asio/post.hpp>

#include "hang/hang.h"
#include "job/job.h"
#include "log.h"
#include "report/report.h"

namespace dtrun::agent::detail {
namespace {

namespace asio = boost::asio;

constexpr std::chrono::seconds kPollPeriod{1};
constexpr std::chrono::milliseconds kAnswerPoll{200};

// This node's ranks, on the dump thread: one at a time, as the hang watch reads them.
std::vector<RankStacks> readNode(const std::vector<StackTarget>& targets, int node,
                                 const std::string& host, const std::string& pathVariable,
                                 const std::atomic<bool>& cancelled) {
  std::vector<RankStacks> ranks;
  for (const StackTarget& t : targets) {
    const WorkerStacks read = readStacks(t, pathVariable, cancelled);
    ranks.push_back(
        RankStacks{t.rank, node, host, t.pid, read.python, mainThreadOf(read.native, t.pid)});
  }
  return ranks;
}

}  // namespace

struct StackDumps::Pending {
  StackFacts facts;
  std::optional<std::vector<RankStacks>> mine;
  std::optional<std::vector<NodeStacks>> others;
  std::vector<std::string> notes;
};

StackDumps::StackDumps(asio::io_context& io, const AgentConfig& config, std::string host,
                       std::string pathVariable, const WorkerGroup& group,
                       std::function<StackFacts()> facts)
    : io_(io),
      config_(config),
      host_(std::move(host)),
      pathVariable_(std::move(pathVariable)),
      group_(group),
      facts_(std::move(facts)),
      pollTimer_(io),
      cancelled_(std::make_shared<std::atomic<bool>>(false)),
      dumpThread_(std::make_unique<TaskThread>()),
      storeThread_(std::make_unique<TaskThread>()) {}

StackDumps::~StackDumps() {
  *cancelled_ = true;  // the poll timer's own destructor cancels its wait
  storeThread_.reset();
  dumpThread_.reset();
}

Status StackDumps::connect(const rdzv::StoreFactory& stores, bool gathers) {
  DTRUN_ASSIGN_OR_RETURN(store_, stores());
  gathers_ = gathers;
  if (!gathers_) {
    poll();
  }
  return Status::ok();
}

// A non-gathering agent: the request key, every second. The first look only notes what is
// there (a request of before this agent joined is not answered).
void StackDumps::poll() {
  const std::string key = "dtrun/" + config_.runId + "/stacks/request";
  storeThread_->post([this, key, cancelled = cancelled_] {
    if (*cancelled) {
      return;
    }
    const auto value = store_->tryGet(key);
    std::optional<std::string> id;
    if (value.isOk()) {
      id = value.value() ? std::string(*value.value()) : std::string();
    }
    asio::post(io_, [this, cancelled, id = std::move(id)] {
      if (*cancelled) {
        return;
      }
      if (id && lastRequest_ && *id != *lastRequest_ && !id->empty()) {
        answer(*id);
      }
      if (id) {
        lastRequest_ = id;
      }
      pollTimer_.expires_after(kPollPeriod);
      pollTimer_.async_wait([this](const boost::system::error_code& ec) {
        if (!ec) {
          poll();
        }
      });
    });
  });
}

// The gathering agent's request `id`: this node's stacks, under dtrun/<run>/stacks/<id>/n<node>.
void StackDumps::answer(const std::string& id) {
  const StackFacts facts = facts_();
  log::agent().info("the gathering agent asked for the stacks of this node's workers (request {})",
                    id);
  std::vector<StackTarget> targets = beginStackDump(group_, false);
  dumpThread_->post(
      [this, targets = std::move(targets), node = facts.nodeRank, id, cancelled = cancelled_] {
        NodeStacks mine{node, host_, readNode(targets, node, host_, pathVariable_, *cancelled)};
        asio::post(io_, [this, id, text = toJson(mine).dump(), node] {
          const std::string key =
              "dtrun/" + config_.runId + "/stacks/" + id + "/n" + std::to_string(node);
          storeThread_->post([this, key, text] {
            if (const Status s = store_->set(key, text); !s.isOk()) {
              log::agent().warn("could not answer the request for stacks: {}", s.message());
            }
          });
        });
      });
}

void StackDumps::request(Done done) {
  waiters_.push_back(std::move(done));
  if (pending_) {
    return;  // the dump under way answers this one too
  }
  pending_ = std::make_unique<Pending>();
  pending_->facts = facts_();
  const StackFacts& facts = pending_->facts;
  const bool multiNode = config_.multiNode.has_value();
  if (multiNode && !(store_ && gathers_)) {
    pending_->notes.push_back("node " + std::to_string(facts.nodeRank) +
                              " only: the agent that gathers the job (the store's host) has the "
                              "stacks of every node");
  }
  std::vector<StackTarget> targets = beginStackDump(group_, false);
  dumpThread_->post(
      [this, targets = std::move(targets), node = facts.nodeRank, cancelled = cancelled_] {
        auto ranks = readNode(targets, node, host_, pathVariable_, *cancelled);
        asio::post(io_, [this, ranks = std::move(ranks)]() mutable {
          pending_->mine = std::move(ranks);
          finishIfComplete();
        });
      });
  if (!store_ || !gathers_ || facts.otherNodes.empty()) {
    pending_->others.emplace();
    return;
  }
  const std::string prefix = "dtrun/" + config_.runId + "/stacks/";
  storeThread_->post([this, prefix, nodes = facts.otherNodes, cancelled = cancelled_] {
    std::vector<NodeStacks> others;
    std::vector<std::string> notes;
    const auto count = store_->takeTicket(prefix + "count");
    const Status asked = count.isOk()
                             ? store_->set(prefix + "request", std::to_string(count.value()))
                             : count.status();
    std::set<int> waiting(nodes.begin(), nodes.end());
    if (!asked.isOk()) {
      notes.push_back("the other nodes could not be asked: " + asked.message());
      waiting.clear();
    }
    const auto deadline = std::chrono::steady_clock::now() + kGatherDeadline;
    while (!waiting.empty() && !*cancelled && std::chrono::steady_clock::now() < deadline) {
      for (auto it = waiting.begin(); it != waiting.end();) {
        const std::string key = prefix + std::to_string(count.value()) + "/n" + std::to_string(*it);
        const auto value = store_->tryGet(key);
        if (!value.isOk() || !value.value()) {
          ++it;
          continue;
        }
        const auto json = nlohmann::json::parse(*value.value(), nullptr, false);
        if (auto node = json.is_discarded() ? std::nullopt : nodeStacksFromJson(json)) {
          if (node->ranks.empty()) {
            notes.push_back("node " + std::to_string(*it) + " (" + node->host +
                            "): no running worker");
          }
          others.push_back(std::move(*node));
        }
        static_cast<void>(store_->deleteKey(key));
        it = waiting.erase(it);
      }
      if (!waiting.empty()) {
        std::this_thread::sleep_for(kAnswerPoll);
      }
    }
    for (const int node : waiting) {
      notes.push_back("node " + std::to_string(node) + ": no answer within " +
                      std::to_string(kGatherDeadline.count()) + " s");
    }
    asio::post(io_, [this, others = std::move(others), notes = std::move(notes)]() mutable {
      pending_->others = std::move(others);
      pending_->notes.insert(pending_->notes.end(), notes.begin(), notes.end());
      finishIfComplete();
    });
  });
}

void StackDumps::finishIfComplete() {
  if (!pending_ || !pending_->mine || !pending_->others) {
    return;
  }
  const std::unique_ptr<Pending> done = std::move(pending_);
  std::vector<RankStacks> ranks = std::move(*done->mine);
  std::set<int> nodes;
  if (!ranks.empty()) {
    nodes.insert(done->facts.nodeRank);
  }
  for (NodeStacks& node : *done->others) {
    if (!node.ranks.empty()) {
      nodes.insert(node.node);
    }
    ranks.insert(ranks.end(), node.ranks.begin(), node.ranks.end());
  }
  std::sort(ranks.begin(), ranks.end(),
            [](const RankStacks& a, const RankStacks& b) { return a.rank < b.rank; });
  if (ranks.empty()) {
    done->notes.push_back("no running worker");
  }
  const int n = ++written_;
  const std::string heading =
      "dtrun stacks #" + std::to_string(n) + " of run " + config_.runId + ": " +
      std::to_string(ranks.size()) + (ranks.size() == 1 ? " rank on " : " ranks on ") +
      std::to_string(nodes.size()) + (nodes.size() == 1 ? " node" : " nodes") +
      ", grouped by identical stacks";
  Answer answer;
  answer.text = groupStacks(heading, ranks, done->notes);
  if (!done->facts.runDir.empty()) {
    const auto file = done->facts.runDir / ("stacks-" + std::to_string(n) + ".txt");
    if (writeFileAtomically(file.string(), answer.text)) {
      answer.file = file.string();
    }
  }
  log::agent().info("stacks of {} rank(s) gathered{}", ranks.size(),
                    answer.file.empty() ? "" : " into " + answer.file);
  for (const Done& waiter : std::exchange(waiters_, {})) {
    waiter(answer);
  }
}

}  // namespace dtrun::agent::detail
