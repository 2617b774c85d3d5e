// Stacks on demand (`dtrun stacks ADDR`, GET /stacks, SIGRTMIN+3 to the agent): every running
// worker's Python and native stacks, dumped as the hang watch dumps them, grouped by identical
// stacks (stack_groups.h) and written to <run dir>/stacks-<n>.txt; the job runs on. Multi-node,
// the agent that gathers the job asks every node through the job's store: it writes a request
// id under dtrun/<run>/stacks/request, each other agent (which looks at that key every second)
// dumps its workers and answers under dtrun/<run>/stacks/<id>/n<node>. The dumps run on a thread
// of their own and the store calls on another; results come back through the agent's
// io_context, so its loop never waits. Not thread-safe: the agent's loop only.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "dtrun/agent_config.h"
#include "dtrun/rendezvous.h"

#include "live/stack_groups.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

class TaskThread;

// What the wiring knows when a dump begins.
struct StackFacts {
  int nodeRank = 0;
  std::vector<int> otherNodes;  // the live ones, to wait for (the gathering agent)
  std::filesystem::path runDir;
};

class StackDumps {
 public:
  // How long the gathering agent waits for the other nodes' answers.
  static constexpr std::chrono::seconds kGatherDeadline{60};

  struct Answer {
    std::string text;  // the grouped stacks
    std::string file;  // where they were written ("" when writing failed)
  };
  using Done = std::function<void(const Answer&)>;

  // `group` and `facts` outlive this object (the agent owns both).
  StackDumps(boost::asio::io_context& io, const AgentConfig& config, std::string host,
             std::string pathVariable, const WorkerGroup& group, std::function<StackFacts()> facts);
  StackDumps(const StackDumps&) = delete;
  StackDumps& operator=(const StackDumps&) = delete;
  StackDumps(StackDumps&&) = delete;
  StackDumps& operator=(StackDumps&&) = delete;
  ~StackDumps();  // cuts a dump under way short and joins its threads

  // Multi-node: opens a connection of its own to the job's store. `gathers`: this agent asks
  // every node; else it answers the gathering agent's requests from now on.
  [[nodiscard]] Status connect(const rdzv::StoreFactory& stores, bool gathers);

  // Dumps this node's workers (and, when gathering, every node's); `done` runs on the loop once
  // the text is written. A request while one is under way gets that one's answer.
  void request(Done done);

 private:
  struct Pending;
  void poll();
  void answer(const std::string& id);
  void finishIfComplete();

  boost::asio::io_context& io_;
  const AgentConfig& config_;
  const std::string host_;
  const std::string pathVariable_;
  const WorkerGroup& group_;
  std::function<StackFacts()> facts_;
  std::unique_ptr<rdzv::Store> store_;  // used on storeThread_ only
  bool gathers_ = false;
  std::optional<std::string> lastRequest_;  // the request id seen last (not gathering)
  boost::asio::steady_timer pollTimer_;
  std::vector<Done> waiters_;
  std::unique_ptr<Pending> pending_;  // the dump under way
  int written_ = 0;                   // stacks-<n>.txt files so far
  std::shared_ptr<std::atomic<bool>> cancelled_;
  std::unique_ptr<TaskThread> dumpThread_;
  std::unique_ptr<TaskThread> storeThread_;  // declared last: joined before the store goes
};

}  // namespace dtrun::agent::detail
