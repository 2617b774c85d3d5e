// Progress across the nodes of a job, for hang detection: each agent publishes its ranks'
// progress under an ordinary store key of the job, dtrun/<job>/progress/r<round>/n<node>, and
// reads the other nodes' keys, so that a diagnosis names ranks on every node. Ages (how long a
// rank has been in its operation, since its last change) travel instead of clock readings:
// hosts' clocks are never compared. The store calls run on a thread of their own; results come
// back through the agent's io_context, so its loop never blocks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>

#include "dtrun/rendezvous.h"

#include "hang/hang_detector.h"
#include "job/job.h"

namespace dtrun::agent::detail {

// `ranks` as text, with ages as of `nowNs` (CLOCK_MONOTONIC), and back: ages become readings of
// this host's clock at `nowNs`. decodeProgress skips anything malformed.
std::string encodeProgress(const std::vector<RankProgress>& ranks, std::int64_t nowNs);
std::vector<RankProgress> decodeProgress(const std::string& text, std::int64_t nowNs);

class ProgressExchange {
 public:
  // Opens its own connection to the job's store (`stores`); jobId is the run id.
  static Result<std::unique_ptr<ProgressExchange>> connect(boost::asio::io_context& io,
                                                           const rdzv::StoreFactory& stores,
                                                           std::string jobId);
  ProgressExchange(const ProgressExchange&) = delete;
  ProgressExchange& operator=(const ProgressExchange&) = delete;
  ProgressExchange(ProgressExchange&&) = delete;
  ProgressExchange& operator=(ProgressExchange&&) = delete;
  ~ProgressExchange();

  // Publishes `ranks` as node `nodeRank` of `round` (one set) and, with `readOthers`, reads the
  // other nodes' latest (O(nodes) requests: the agent asks only once its own ranks went quiet);
  // `then` runs on the io_context with their ranks. A call while the previous one is still
  // under way is dropped (the next timer tick tries again). Store errors leave `then` uncalled:
  // the agent's own liveness checks judge the store.
  void exchange(std::int64_t round, int nodeRank, int nodeCount,
                const std::vector<RankProgress>& ranks, bool readOthers,
                std::function<void(std::vector<RankProgress>)> then);

 private:
  ProgressExchange(boost::asio::io_context& io, std::unique_ptr<rdzv::Store> store,
                   std::string jobId);
  std::string keyOf(std::int64_t round, int nodeRank) const;

  boost::asio::io_context& io_;
  std::unique_ptr<rdzv::Store> store_;  // used on thread_ only
  const std::string jobId_;
  std::shared_ptr<bool> busy_;          // read and written on the io_context's thread only
  std::unique_ptr<TaskThread> thread_;  // declared last: joined before the store goes
};

}  // namespace dtrun::agent::detail
