// The whole job's live view through the job's store: every agent publishes its node's status
// under dtrun/<run>/live/n<node> each second; the agent that gathers the job (the store's host,
// or the keeper) also reads every other node's. A node whose status stopped changing for
// kStaleAfter (it died, or left) drops out of the view. Store calls run on a thread of their own;
// results come back through the agent's io_context, so its loop never blocks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>

#include "dtrun/rendezvous.h"

#include "live/node_status.h"
#include "workers/workers.h"

namespace dtrun::agent::detail {

class TaskThread;

class LiveExchange {
 public:
  static constexpr std::chrono::seconds kStaleAfter{5};

  // Opens its own connection to the job's store; `gathers`: this agent answers for the job.
  static Result<std::unique_ptr<LiveExchange>> connect(boost::asio::io_context& io,
                                                       const rdzv::StoreFactory& stores,
                                                       std::string runId, bool gathers);
  LiveExchange(const LiveExchange&) = delete;
  LiveExchange& operator=(const LiveExchange&) = delete;
  LiveExchange(LiveExchange&&) = delete;
  LiveExchange& operator=(LiveExchange&&) = delete;
  ~LiveExchange();

  // Publishes `mine` and, when gathering, reads the other nodes of its round; `then` runs on the
  // io_context with the other nodes' live statuses (empty when not gathering). A call while the
  // previous one is under way is dropped; store errors leave `then` uncalled.
  void exchange(const NodeStatus& mine, std::function<void(std::vector<NodeStatus>)> then);
  [[nodiscard]] bool gathers() const { return gathers_; }

 private:
  LiveExchange(boost::asio::io_context& io, std::unique_ptr<rdzv::Store> store, std::string runId,
               bool gathers);
  [[nodiscard]] std::string keyOf(int nodeRank) const;

  boost::asio::io_context& io_;
  std::unique_ptr<rdzv::Store> store_;  // used on thread_ only
  const std::string runId_;
  const bool gathers_;
  std::uint64_t sequence_ = 0;  // what each publication carries, so that staleness is seen
  struct Seen {
    std::uint64_t sequence = 0;
    std::chrono::steady_clock::time_point changed;
  };
  std::map<int, Seen> seen_;  // the io_context's thread only
  std::shared_ptr<bool> busy_;
  std::unique_ptr<TaskThread> thread_;  // declared last: joined before the store goes
};

}  // namespace dtrun::agent::detail
