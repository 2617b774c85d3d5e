// The health checks between rounds, off the agent's loop: they may take their whole bound (a
// silent store, a GPU whose memory is still being released), and meanwhile the loop must go on
// answering signals and the round's news.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <utility>  // before Asio (Boost 1.74 under C++20)
#include <vector>

#include <boost/asio/io_context.hpp>

#include "health/health_checks.h"

namespace dtrun::agent::detail {

// Runs runHealthChecks on a thread of its own and posts the results to the io_context. Used from
// the loop's thread only. A run still under way when the runner is destroyed posts nothing.
class HealthRunner {
 public:
  using Done = std::function<void(std::vector<CheckResult>)>;

  HealthRunner(boost::asio::io_context& io, std::shared_ptr<HealthProbe> probe);
  HealthRunner(const HealthRunner&) = delete;
  HealthRunner& operator=(const HealthRunner&) = delete;
  HealthRunner(HealthRunner&&) = delete;
  HealthRunner& operator=(HealthRunner&&) = delete;
  ~HealthRunner();

  // `done` runs on the loop once every check answered or reached its bound.
  void run(HealthPlan plan, Done done);
  // Blocks the caller instead (before the loop runs).
  [[nodiscard]] std::vector<CheckResult> runHere(const HealthPlan& plan) const;

 private:
  struct Shared {
    std::mutex mutex;
    bool alive = true;  // guarded by mutex: the io_context may still be posted to
  };
  boost::asio::io_context& io_;
  std::shared_ptr<HealthProbe> probe_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

}  // namespace dtrun::agent::detail
